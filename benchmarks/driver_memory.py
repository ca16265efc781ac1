"""Part `driver`: the driver's memory alone: the same submissions in client mode on a standalone cluster.

In local mode (part `spark`) the driver JVM is also the only executor, so a submission's
peak memory is as much the executor's working memory (shuffle and sort buffers, which
the collector grows towards the heap's bound when the data is large enough) as the
driver's. Measurement 4's "driver memory flat" is about the driver: what a stage holds
on the driver (plans, collected aggregates, listings, footers, reports) must not grow
with the rows. Here the five stages, the two fused submissions and an empty submission
run as the operator builds them against a Spark standalone master and one worker on
loopback (`hadoop/cluster.py`, the cluster the integration tests use), in client deploy
mode, the same data on `file://`: the submission's process tree is then the driver
alone (launcher, driver JVM, Python driver), and the executor, a child of the worker, is
sampled apart.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType

from benchmarks.environment import DRIVER_MEMORY, REPO, other_master
from benchmarks.spark_prep import Executors

CLUSTER_PY = REPO / "hadoop" / "cluster.py"
MODULE_NAME = "lakeprep_cluster"  # the name tests/integration/conftest.py loads it under
# What the submissions take from the cluster's client environment: its master as the
# `spark_default` connection, and the loopback address the executor reaches the driver on.
# Not HADOOP_CONF_DIR: the data stays on `file://`, as in part `spark`.
CLIENT_KEYS = ("AIRFLOW_CONN_SPARK_DEFAULT", "SPARK_LOCAL_IP")


def cluster_module() -> ModuleType:
    """`hadoop/cluster.py` (a tool folder, not a package), loaded by path once per process."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(MODULE_NAME, CLUSTER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module  # dataclasses look their module up in sys.modules
    spec.loader.exec_module(module)
    return module


def executor_conf() -> tuple[str, ...]:
    """The executor gets the heap the local-mode JVM had, so its work is sized as in part `spark`."""
    return ("--conf", f"spark.executor.memory={DRIVER_MEMORY}")


@contextlib.contextmanager
def standalone() -> Iterator[Executors]:
    """The loopback cluster, up for the block: started (and stopped after) unless it already
    ran, the children's `spark_default` connection pointed at its master. Yields what the
    submissions add: the executor's heap and the worker whose executors are sampled."""
    cluster = cluster_module()
    was_up = all(row["up"] for row in cluster.status().values())
    try:
        started = cluster.up()
        env = started["env"]
        with other_master({key: env[key] for key in CLIENT_KEYS}):
            yield Executors(conf=executor_conf(), worker_pid=started["pids"]["spark-worker"])
    finally:
        if not was_up:
            cluster.down()
