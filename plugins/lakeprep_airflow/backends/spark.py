"""Backend `spark`: `TorchDistributor` runs the trainer on the Spark cluster.

The Airflow worker becomes the Spark driver (master from the `spark_default`-style
connection, as `SparkSubmitHook` reads it) and hands the trainer's own entry point,
`lakeprep_train.train.main`, to `TorchDistributor.run` with the usual argv. With
`local_mode: false` each of the `num_processes` ranks is a barrier task on an executor
(`torch.distributed.run --nnodes=N --node_rank=<partition>` per task, rendezvous at
the first task's host); with `local_mode: true` torchrun starts them all on the driver.
https://spark.apache.org/docs/latest/api/python/reference/api/pyspark.ml.torch.distributor.TorchDistributor.html

A function, not the script path: for a script, pyspark 4.3's `torch_run_process_wrapper`
drops torchrun's exit code (it always exits 0), so a failed trainer would look like a
finished one. A function's result comes back from rank 0 (`main`'s exit code), and a
rank that dies leaves no result, which TorchDistributor reports as a failure.

The executors import `lakeprep_train` and `lakeprep_contracts` from the same paths as
the driver (`spark.executorEnv.PYTHONPATH`): on a real cluster the training code lives
at the same place on every node (the trainer image), like the venv. Rank 0 writes the
model folder, so `output` must be a path every executor can write that the driver then
reads (one host, or a shared mount): see docs/TRAINING.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lakeprep_airflow.backends.base import Backend, TrainingRun, trainer_pythonpath
from lakeprep_airflow.locations import training_dir


def train_file() -> Path:
    """The trainer's entry module (what the executors import from `spark.executorEnv.PYTHONPATH`)."""
    return training_dir() / "lakeprep_train" / "train.py"


def trainer_entry_point() -> Callable[[list[str]], int]:
    """`lakeprep_train.train.main`, wrapped so cloudpickle ships it by value.

    A nested function is pickled with its code, so the executors need `lakeprep_train`
    (on their PYTHONPATH) but not this plugin package.
    """

    def run_lakeprep_trainer(argv: list[str]) -> int:
        from lakeprep_train.train import main

        return main(argv)

    return run_lakeprep_trainer


def distributor_kwargs(training: Mapping[str, Any]) -> dict[str, Any]:
    """`TorchDistributor(**kwargs)` from the spec's training section, checked."""
    world_size = training["world_size"]
    processes = training.get("num_processes") or world_size
    if processes != world_size:
        raise ValueError(
            f"training.num_processes {processes} must equal training.world_size {world_size}: "
            f"the shards are planned for {world_size} rank(s) (set num_processes to null, or "
            f"export again with world_size {processes})"
        )
    return {
        "num_processes": processes,
        "local_mode": bool(training.get("local_mode", False)),
        "use_gpu": bool(training.get("use_gpu", False)),
    }


def master_url(conn: Any) -> str:
    """The master of a Spark connection, as SparkSubmitHook builds it (host, then port)."""
    host = conn.host or ""
    if "://" in host or host.startswith(("local", "yarn", "k8s")):
        return host
    return f"spark://{host}:{conn.port}" if conn.port else f"spark://{host}"


def session_conf(*, pythonpath: str, python: str) -> dict[str, str]:
    """Spark settings the distributor needs: the executors' Python and the trainer's path."""
    return {
        "spark.pyspark.python": python,
        "spark.executorEnv.PYTHONPATH": pythonpath,
        # Each rank is one task; one task per executor core (Spark's default) keeps a
        # barrier stage of num_processes tasks schedulable on num_processes cores.
        "spark.task.cpus": "1",
        # A failed trainer fails the Airflow task, which has its own retries; Spark
        # retrying the barrier stage would only repeat the failure.
        "spark.task.maxFailures": "1",
        "spark.stage.maxConsecutiveAttempts": "1",
    }


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """`local_mode` launches torchrun with the driver's os.environ: set it for the run."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def run_trainer(
    *,
    args: list[str],
    training: Mapping[str, Any],
    spark_conn_id: str,
    pythonpath: str,
    app_name: str,
    spec_conf: Mapping[str, str] | None = None,
    python: str | None = None,
) -> None:
    """Train with TorchDistributor; a failed rank raises with the trainer's output.

    `spec_conf` is the spec's `spark.conf`, applied over the backend's own settings: the
    GPU resource settings go there or in spark-defaults.conf (docs/TRAINING.md).
    """
    from airflow.sdk import BaseHook
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    kwargs = distributor_kwargs(training)
    connection = BaseHook.get_connection(spark_conn_id)
    master = master_url(connection)
    builder = SparkSession.builder.appName(app_name).master(master)
    conf = session_conf(
        pythonpath=pythonpath, python=python or os.environ.get("PYSPARK_PYTHON", sys.executable)
    )
    if master.startswith("yarn") and (queue := connection.extra_dejson.get("queue")):
        conf["spark.yarn.queue"] = queue  # the stages' queue (`--queue`) for the ranks too
    for key, value in {**conf, **(spec_conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    settings = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    try:
        with _environ("PYTHONPATH", pythonpath):
            exit_code = TorchDistributor(**kwargs).run(trainer_entry_point(), list(args))
    except Exception as err:  # Py4J and Spark job failures carry the failing task's traceback
        raise RuntimeError(f"TorchDistributor({settings}) on {master} failed: {err}") from err
    finally:
        spark.stop()
    if exit_code != 0:
        raise RuntimeError(
            f"TorchDistributor({settings}) on {master}: lakeprep_train.train exited with {exit_code} "
            "on rank 0 (its reason is in the ranks' output above)"
        )


class SparkBackend(Backend):
    """`training.backend: spark`: TorchDistributor on the cluster of the `spark_conn_id` connection."""

    name = "spark"
    uses_connection = True

    def train(self, run: TrainingRun) -> None:
        run.clear_model_dir(self.log)
        run.model_dir.mkdir(parents=True)
        args = run.trainer_args()
        self.log.info("TorchDistributor: %s %s", train_file(), " ".join(args))
        run_trainer(
            args=args,
            training=run.training,
            spark_conn_id=str(self.conn_id),
            pythonpath=trainer_pythonpath(),
            app_name=f"lakeprep-train-{run.dataset}-{run.run_ds}",
            spec_conf=run.spark_conf,
        )
