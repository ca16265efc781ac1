"""The loopback cluster for the integration tests: started once per run, stopped at the end."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_cluster_module() -> ModuleType:
    """hadoop/ is a tool folder, not a package: load cluster.py by path."""
    spec = importlib.util.spec_from_file_location("lakeprep_cluster", REPO / "hadoop" / "cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up in sys.modules
    spec.loader.exec_module(module)
    return module


cluster_module = _load_cluster_module()


@pytest.fixture(scope="session")
def hdfs_spark_cluster() -> Iterator[dict]:
    """A running cluster, its client environment exported (Airflow connections included).

    Leaves the cluster as it found it: stopped at the end unless it was already fully up
    (a developer's own cluster is not torn down by a test run). Startup errors fail the
    tests: nothing here skips.
    """
    was_up = all(row["up"] for row in cluster_module.status().values())
    try:
        started = cluster_module.up()
    except BaseException:
        cluster_module.down()
        raise
    with pytest.MonkeyPatch.context() as env:
        for name, value in started["env"].items():
            env.setenv(name, value)
        yield started
    if not was_up:
        cluster_module.down()
