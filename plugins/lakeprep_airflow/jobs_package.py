"""Package `spark_jobs/lakeprep_jobs` as the zip that spark-submit ships with `--py-files`.

Built on the worker when a stage starts, named by the hash of its contents: a changed
job is never shipped stale, concurrent tasks never overwrite each other's zip, and an
unchanged tree is zipped once.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

from lakeprep_airflow.locations import cache_dir, spark_jobs_dir

PACKAGE = "lakeprep_jobs"


def _sources(jobs_dir: Path) -> list[Path]:
    pkg = jobs_dir / PACKAGE
    if not (pkg / "__init__.py").is_file():
        raise FileNotFoundError(f"Spark jobs package not found at {pkg} (set LAKEPREP_SPARK_JOBS_DIR)")
    return sorted(p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)


def build_zip(jobs_dir: Path | None = None, out_dir: Path | None = None) -> Path:
    """Return the path of `lakeprep_jobs-<hash>.zip`, building it if needed."""
    jobs_dir = jobs_dir or spark_jobs_dir()
    files = _sources(jobs_dir)
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(jobs_dir)).encode())
        digest.update(f.read_bytes())
    target = (out_dir or cache_dir()) / f"{PACKAGE}-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            info = zipfile.ZipInfo(str(f.relative_to(jobs_dir)), date_time=(1980, 1, 1, 0, 0, 0))
            zf.writestr(info, f.read_bytes())
    os.replace(tmp, target)
    return target


def stage_script(stage: str, jobs_dir: Path | None = None) -> Path:
    script = (jobs_dir or spark_jobs_dir()) / PACKAGE / f"{stage}.py"
    if not script.is_file():
        raise FileNotFoundError(f"no Spark job for stage {stage!r} at {script}")
    return script
