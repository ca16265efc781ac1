"""The loopback cluster for the integration tests: started once per run, stopped at the end."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks.driver_memory import cluster_module as load_cluster_module

REPO = Path(__file__).resolve().parents[2]


# hadoop/ is a tool folder, not a package: cluster.py loaded by path, once per process,
# under the one name the benchmarks' `driver` part uses too.
cluster_module = load_cluster_module()


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


@pytest.fixture(scope="session")
def yarn_cluster(hdfs_spark_cluster) -> Iterator[dict]:
    """The cluster with YARN's ResourceManager and NodeManager too, started for the first
    test that asks (the other tests do not pay for them); its YARN client environment.

    Nothing is exported here, since most tests of the run use the standalone master:
    take the environment with `yarn_env` (one test) or pass ``["env"]`` to a subprocess.
    YARN is stopped at the end unless it was already up.
    """
    was_up = all(row["up"] for row in cluster_module.status(yarn=True).values())
    try:
        started = cluster_module.up(yarn=True)
    except BaseException:
        for name in ("nodemanager", "resourcemanager"):
            cluster_module.stop_service(name)
        raise
    yield started
    if not was_up:
        for name in ("nodemanager", "resourcemanager"):
            cluster_module.stop_service(name)


@pytest.fixture
def yarn_env(yarn_cluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """For one test: Spark on the cluster's YARN (cluster deploy mode, queue `ml`)."""
    for name, value in yarn_cluster["env"].items():
        monkeypatch.setenv(name, value)
    return yarn_cluster["env"]


@pytest.fixture(autouse=True)
def no_in_process_driver_outlives_a_cluster_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the cluster starts without this process's local Spark session and leaves
    none connected to the cluster, pass or fail; the next `spark` gets a local one again.

    In-process code under test (the `spark` backend's TorchDistributor driver) builds its
    session with `getOrCreate`, which would hand it the run's local session instead of one
    on the cluster's master (and its `stop()` would stop ours). A driver left connected
    would be taken for the local session by later tests, and the master stops it when
    it ends or loses the application (issue 31: 179 errors on one worker).
    """
    if "hdfs_spark_cluster" not in request.fixturenames:
        yield
        return
    local_spark = request.getfixturevalue("local_spark")
    local_spark.stop()
    try:
        yield
    finally:
        local_spark.stop()  # started again, local, by the next test that asks for `spark`


def _load_airflow_stack_module() -> ModuleType:
    """ops/ is a tool folder too: load airflow_stack.py by path, like cluster.py."""
    spec = importlib.util.spec_from_file_location("lakeprep_airflow_stack", REPO / "ops" / "airflow_stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


airflow_stack_module = _load_airflow_stack_module()


# Copies of the flights spec the stack serves beside it: their own names (DAG
# `lakeprep_<name>`, lake folders `<stage>/<name>/`), the same raw and reference data,
# stages fused and a retry 5 s after a failure, so that a multi-day test fits the suite.
# CATCHUP_SPEC: two days with catchup on (test_schedule.py); BACKFILL_SPEC: the days
# test_backfill.py backfills.
CATCHUP_SPEC = "flights_catchup"
CATCHUP_DAYS = ("2013-03-01", "2013-03-02")
BACKFILL_SPEC = "flights_backfill"
FAST = {"spark": {"fuse_stages": True}, "tasks": {"retries": 2, "retry_delay_seconds": 5}}


def _stack_pipelines(folder: Path) -> Path:
    """The stack's specs: the project's own, plus the catch-up and backfill copies of flights."""
    import shutil

    import yaml

    for spec in sorted((REPO / "pipelines").glob("*.yaml")):
        shutil.copy(spec, folder / spec.name)
    flights = yaml.safe_load((REPO / "pipelines" / "flights.yaml").read_text())
    copies = {
        CATCHUP_SPEC: {"start_date": CATCHUP_DAYS[0], "end_date": CATCHUP_DAYS[-1], "catchup": True},
        BACKFILL_SPEC: {},
    }
    for name, changes in copies.items():
        data = {**flights, **changes, "name": name, **FAST}
        data["spark"] = {**flights.get("spark", {}), **FAST["spark"]}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return folder


@pytest.fixture(scope="session")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The real Airflow services on PostgreSQL (ops/airflow_stack.py), for this run only.

    A stack of its own, in a fresh state dir on free ports, with its lake under pytest's
    tmp dir: a developer's stack in .stack/ keeps running untouched (its lake root is fixed
    while it runs, so it could not be reused for a test lake). Spark runs local, whatever
    another fixture exported. Its specs are the project's plus `CATCHUP_SPEC` and
    `BACKFILL_SPEC` (new DAGs start paused: only the test that unpauses one runs it). Stopped at the end; the
    service and task logs are copied
    to ``<tmp>/airflow-stack-logs`` first. Startup errors fail the tests: nothing skips.
    """
    import shutil
    import tempfile

    lake = tmp_path_factory.mktemp("stack-lake")
    # Not under pytest's tmp dir: that is 0700 root, and PostgreSQL runs as `postgres`.
    state_dir = Path(tempfile.mkdtemp(prefix="lakeprep-airflow-stack-"))
    try:
        started = airflow_stack_module.up(
            state_dir,
            lake_root=f"file://{lake}",
            ports=airflow_stack_module.Ports.free(),
            spark_conn='{"conn_type": "spark", "host": "local[2]"}',
            pipelines_dir=_stack_pipelines(tmp_path_factory.mktemp("stack-pipelines")),
        )
        started["client"] = airflow_stack_module.AirflowClient(
            started["base_url"], started["username"], started["password"]
        )
        yield started
    finally:
        try:
            airflow_stack_module.down(state_dir)
        finally:
            kept = tmp_path_factory.getbasetemp() / "airflow-stack-logs"
            for folder in ("logs", "airflow/logs"):
                if (state_dir / folder).is_dir():
                    shutil.copytree(state_dir / folder, kept / folder, dirs_exist_ok=True)
            shutil.rmtree(state_dir, ignore_errors=True)


STACK_DAY = "2013-01-01"
STACK_RUN_ID = f"stack__{STACK_DAY}"  # the run test_airflow_services triggers


@pytest.fixture(scope="session")
def stack_day_run(airflow_stack: dict) -> dict:
    """A finished run of lakeprep_flights for 2013-01-01 on the stack, its DAG run as the API gives it.

    Reuses the run `stack__2013-01-01` when it exists (test_airflow_services triggers it),
    else lands the day, unpauses both DAGs and triggers it the same way; then waits for a
    final state. A run that did not succeed fails the caller: nothing skips.
    """
    import datetime as dt
    import time

    from lakeprep_airflow.demo_data import land

    client, dag_id = airflow_stack["client"], "lakeprep_flights"
    path = f"/api/v2/dags/{dag_id}/dagRuns/{STACK_RUN_ID}"
    if client.request("GET", path).status_code == 404:
        land(airflow_stack["lake_root"], dt.date.fromisoformat(STACK_DAY), dt.date.fromisoformat(STACK_DAY))
        for dag in (dag_id, f"{dag_id}_train"):
            client.wait_for_dag(dag)
            client.patch(f"/api/v2/dags/{dag}", {"is_paused": False}, update_mask="is_paused")
        client.post(
            f"/api/v2/dags/{dag_id}/dagRuns",
            {
                "dag_run_id": STACK_RUN_ID,
                "logical_date": f"{STACK_DAY}T00:00:00Z",
                "conf": {"sample_fraction": 0.8, "seed": 3},
            },
        )
    deadline = time.monotonic() + 600
    while (run := client.get(path))["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, f"{STACK_RUN_ID} still {run['state']} after 600 s"
        time.sleep(3)
    assert run["state"] == "success", f"{STACK_RUN_ID} is {run['state']}: see <tmp>/airflow-stack-logs"
    return run
