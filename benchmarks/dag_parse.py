"""Part `parse`: parse time of `dags/lakeprep_datasets.py` as Airflow 3.3's DAG processor spends it.

    python -m benchmarks.dag_parse --pipelines <folder of specs> --reps 5

The DAG processor (airflow/dag_processing/manager.py and processor.py) pre-imports the
`airflow.*` modules a DAG file names (`parsing_pre_import_modules`, default on), then
forks one child per file, which builds a `BundleDagBag` for the file and serializes its
DAGs; the manager's `last_duration` for the file (what `airflow dags list-import-errors`
and the `dag_processing.last_duration` metric report) is the time from the fork to the
child's exit. This probe does the same from a warm parent: pre-import as the manager
does, then per repetition fork, `BundleDagBag(file)` + `_serialize_dags`, exit. It
reports that wall time (`processor_s`), the child's CPU time (`cpu_s`, user + system,
steadier than wall time on a loaded machine) and, from inside the child, the DagBag's own
`FileLoadStat.duration` (`dagbag_s`, what `airflow dags report` prints) and the
serialization time. The lakeprep modules are not in the parent (the manager does not
import them either), so every child imports them again, as in production (from the
bytecode the warm-up child wrote, as Python does by default: `probe`).

`gc_full_s` is the child's time in full (generation 2) garbage collections. The manager
calls `gc.freeze()` once before its loop (manager.py `before_run`), so a child's full
collection skips what the manager held then; the probe's parent freezes at the same point
(before the pre-import). Without it a full collection in the child walks all ~200,000
objects of the parent (~0.15 s of CPU), and whether one lands in the child depends on the
parent's allocation counters, not on the DAG file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from benchmarks.environment import REPO
from benchmarks.measure import emit_result

DAG_FILE = REPO / "dags" / "lakeprep_datasets.py"


FLOOR_FILE = REPO / "benchmarks" / "jobs" / "floor_dags.py"


def dag_shapes() -> list[dict]:
    """What Airflow sees of the DAG file's DAGs: ids, schedules, Params, task ids and edges
    (the floor file rebuilds them from this, see benchmarks/jobs/floor_dags.py)."""
    from airflow.dag_processing.dagbag import BundleDagBag

    bag = BundleDagBag(
        dag_folder=str(DAG_FILE), bundle_path=DAG_FILE.parent, bundle_name="dags-folder", load_op_links=False
    )
    if bag.import_errors:
        raise RuntimeError(f"parsing {DAG_FILE} failed: {bag.import_errors}")
    shapes = []
    for dag in bag.dags.values():
        schedule = dag.schedule if isinstance(dag.schedule, str) else None  # an Asset schedule: none
        shapes.append(
            {
                "dag_id": dag.dag_id,
                "schedule": schedule,
                "params": {name: _param_shape(dag.params.get_param(name)) for name in dag.params},
                "tasks": list(dag.task_dict),
                "edges": [[t.task_id, d] for t in dag.tasks for d in sorted(t.downstream_task_ids)],
            }
        )
    return shapes


def _param_shape(param) -> dict:
    return {"default": param.value, "description": param.description, "schema": param.schema}


def _child(write_fd: int, dag_file: Path) -> None:
    import structlog
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.dag_processing.processor import _serialize_dags

    full_gc = _time_full_collections()
    start = time.perf_counter()
    bag = BundleDagBag(
        dag_folder=str(dag_file), bundle_path=dag_file.parent, bundle_name="dags-folder", load_op_links=False
    )
    parsed = time.perf_counter()
    serialized, errors = _serialize_dags(bag, structlog.get_logger())
    done = time.perf_counter()
    [stat] = bag.dagbag_stats
    payload = {
        "dagbag_s": stat.duration.total_seconds(),
        "bag_s": parsed - start,
        "serialize_s": done - parsed,
        "gc_full_s": sum(full_gc),
        "dags": len(serialized),
        "import_errors": {**bag.import_errors, **errors},
    }
    os.write(write_fd, json.dumps(payload).encode())


def _time_full_collections() -> list[float]:
    """Seconds of each full garbage collection from now on in this process (a gc callback)."""
    import gc

    spent: list[float] = []
    started: list[float] = []

    def on_collect(phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            spent.append(time.perf_counter() - started.pop())

    gc.callbacks.append(on_collect)
    return spent


def probe(reps: int, warmup: int, dag_file: Path = DAG_FILE) -> list[dict]:
    import structlog
    from airflow.dag_processing.processor import _pre_import_airflow_modules

    # Python's default: an import writes the module's bytecode (`__pycache__`) and later ones
    # read it, so a DAG processor's children compile lakeprep's modules once, in the first
    # parse (here the discarded warm-up fork). PYTHONDONTWRITEBYTECODE, where the environment
    # sets it, would make every parse compile them again (about 23 ms of a parse here).
    sys.dont_write_bytecode = False
    gc.freeze()  # as the manager does before its loop (manager.py `before_run`), before any pre-import
    _pre_import_airflow_modules(str(dag_file), structlog.get_logger())
    runs = []
    for i in range(warmup + reps):
        read_fd, write_fd = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the file processor
            os.close(read_fd)
            code = 0
            try:
                _child(write_fd, dag_file)
            except BaseException as err:  # report, never fall back into the parent's loop
                os.write(write_fd, json.dumps({"error": repr(err)}).encode())
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        chunks = []
        while chunk := os.read(read_fd, 1 << 16):
            chunks.append(chunk)
        os.close(read_fd)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        result = json.loads(b"".join(chunks) or b"{}")
        if os.waitstatus_to_exitcode(status) != 0 or "error" in result or result.get("import_errors"):
            raise RuntimeError(f"parsing {dag_file} failed: {result}")
        if i >= warmup:
            runs.append(
                {
                    "processor_s": round(wall, 4),
                    "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
                    **{k: round(v, 4) for k, v in result.items() if k.endswith("_s")},
                    "dags": result["dags"],
                }
            )
    return runs


def write_specs(folder: Path, count: int) -> Path:
    """`count` copies of pipelines/flights.yaml, each named for its file (as load_spec requires)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    text = (REPO / "pipelines" / "flights.yaml").read_text()
    if "\nname: flights\n" not in text:
        raise ValueError("pipelines/flights.yaml has no top-level `name: flights` line to rename")
    for i in range(count):
        name = "flights" if count == 1 else f"flights_{i:02d}"
        (folder / f"{name}.yaml").write_text(text.replace("\nname: flights\n", f"\nname: {name}\n"))
    return folder


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", required=True, help="LAKEPREP_PIPELINES_DIR for the parse")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--floor",
        type=Path,
        metavar="SHAPES_JSON",
        help="parse the floor instead: the same DAGs' shape as EmptyOperators (written to SHAPES_JSON)",
    )
    args = parser.parse_args(argv)
    os.environ["LAKEPREP_PIPELINES_DIR"] = args.pipelines
    if args.floor:
        # The shape comes from a child, so that this parent holds no lakeprep module.
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                args.floor.write_text(json.dumps(dag_shapes()))
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"could not read the DAGs' shape from {DAG_FILE} (traceback above)")
        os.environ["LAKEPREP_BENCH_DAG_SHAPES"] = str(args.floor)
        emit_result({"runs": probe(args.reps, args.warmup, FLOOR_FILE)})
    else:
        emit_result({"runs": probe(args.reps, args.warmup)})


if __name__ == "__main__":
    main()
