"""Package `lakeprep_jobs` and `lakeprep_contracts` as the zip spark-submit ships (`--py-files`).

Built on the worker when a stage starts, named by the hash of its contents: a changed
job is never shipped stale, concurrent tasks never overwrite each other's zip, and an
unchanged tree is zipped once.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

from lakeprep_airflow.locations import cache_dir, contracts_dir, spark_jobs_dir

PACKAGE = "lakeprep_jobs"
CONTRACTS_PACKAGE = "lakeprep_contracts"
LOG4J2_CONFIG = "log4j2.properties"
# The job that runs several stages in one submission (`lakeprep_jobs/fused.py`).
FUSED_JOB = "fused"


def _sources(root: Path, package: str, hint: str) -> list[tuple[Path, str]]:
    """(file, name in the zip) of a package's modules and JSON schemas."""
    pkg = root / package
    if not (pkg / "__init__.py").is_file():
        raise FileNotFoundError(f"package {package} not found at {pkg} (set {hint})")
    files = sorted(p for p in pkg.rglob("*") if p.suffix in (".py", ".json") and "__pycache__" not in p.parts)
    return [(f, str(f.relative_to(root))) for f in files]


def build_zip(
    jobs_dir: Path | None = None, out_dir: Path | None = None, contracts: Path | None = None
) -> Path:
    """Return the path of `lakeprep_jobs-<hash>.zip` (jobs + contracts), building it if needed."""
    files = _sources(jobs_dir or spark_jobs_dir(), PACKAGE, "LAKEPREP_SPARK_JOBS_DIR") + _sources(
        contracts or contracts_dir(), CONTRACTS_PACKAGE, "LAKEPREP_CONTRACTS_DIR"
    )
    digest = hashlib.sha256()
    for f, name in files:
        digest.update(name.encode())
        digest.update(f.read_bytes())
    target = (out_dir or cache_dir()) / f"{PACKAGE}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for f, name in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zf.writestr(info, f.read_bytes())
    os.replace(tmp, target)
    return target


def log4j2_config(jobs_dir: Path | None = None) -> Path:
    """The stages' log4j2 configuration (`spark_jobs/log4j2.properties`): Spark at WARN unless asked."""
    config = (jobs_dir or spark_jobs_dir()) / LOG4J2_CONFIG
    if not config.is_file():
        raise FileNotFoundError(f"no log4j2 configuration for the stages at {config}")
    return config


def stage_script(stage: str, jobs_dir: Path | None = None) -> Path:
    script = (jobs_dir or spark_jobs_dir()) / PACKAGE / f"{stage}.py"
    if not script.is_file():
        raise FileNotFoundError(f"no Spark job for stage {stage!r} at {script}")
    return script
