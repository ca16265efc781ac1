"""Where lakeprep's own code lives on an Airflow worker, and where its lake is.

Defaults fit a checkout (`<repo>/spark_jobs`, `<repo>/training`); containers and real
deployments point the environment variables at their mounts instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAKE_ROOT_VARIABLE = "lakeprep_lake_root"
# Rendered by Airflow in the task: the Variable (or AIRFLOW_VAR_LAKEPREP_LAKE_ROOT).
LAKE_ROOT_TEMPLATE = "{{ var.value.get('" + LAKE_ROOT_VARIABLE + "', '') }}"
# The run's date: the logical date, or the run's time when a manual run has none.
RUN_DS_TEMPLATE = (
    "{{ (logical_date if logical_date is defined and logical_date else dag_run.run_after) | ds }}"
)


def spark_jobs_dir() -> Path:
    return Path(os.environ.get("LAKEPREP_SPARK_JOBS_DIR") or REPO / "spark_jobs")


def training_dir() -> Path:
    return Path(os.environ.get("LAKEPREP_TRAINING_DIR") or REPO / "training")


def contracts_dir() -> Path:
    """Where `lakeprep_contracts` lives: shipped in the jobs zip, on the trainer's path."""
    return Path(os.environ.get("LAKEPREP_CONTRACTS_DIR") or REPO / "contracts")


def cache_dir() -> Path:
    path = Path(os.environ.get("LAKEPREP_CACHE_DIR") or Path(tempfile.gettempdir()) / "lakeprep")
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_lake_root(rendered: str) -> str:
    """The rendered lake root, or a clear error saying how to configure it."""
    root = (rendered or "").strip()
    if not root:
        raise ValueError(
            f"the lake root is not configured: set the Airflow Variable {LAKE_ROOT_VARIABLE!r} "
            "(or the environment variable AIRFLOW_VAR_LAKEPREP_LAKE_ROOT) to a URI such as "
            "file:///data/lake or hdfs://namenode:8020/lake"
        )
    if "://" not in root:
        raise ValueError(f"lake root {root!r} must be a URI with a scheme (file://, hdfs://)")
    return root.rstrip("/")
