"""(c) Parse time of `dags/lakeprep_datasets.py` as Airflow 3.3's DAG processor spends it.

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
import them either), so every child imports them again, as in production.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.environment import REPO
from benchmarks.measure import emit_result

DAG_FILE = REPO / "dags" / "lakeprep_datasets.py"


def _child(write_fd: int) -> None:
    import structlog
    from airflow.dag_processing.dagbag import BundleDagBag
    from airflow.dag_processing.processor import _serialize_dags

    start = time.perf_counter()
    bag = BundleDagBag(
        dag_folder=str(DAG_FILE), bundle_path=DAG_FILE.parent, bundle_name="dags-folder", load_op_links=False
    )
    parsed = time.perf_counter()
    serialized, errors = _serialize_dags(bag, structlog.get_logger())
    done = time.perf_counter()
    [stat] = bag.dagbag_stats
    payload = {
        "dagbag_s": stat.duration.total_seconds(),
        "bag_s": parsed - start,
        "serialize_s": done - parsed,
        "dags": len(serialized),
        "import_errors": {**bag.import_errors, **errors},
    }
    os.write(write_fd, json.dumps(payload).encode())


def probe(reps: int, warmup: int) -> list[dict]:
    import structlog
    from airflow.dag_processing.processor import _pre_import_airflow_modules

    _pre_import_airflow_modules(str(DAG_FILE), structlog.get_logger())
    runs = []
    for i in range(warmup + reps):
        read_fd, write_fd = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the file processor
            os.close(read_fd)
            code = 0
            try:
                _child(write_fd)
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
            raise RuntimeError(f"parsing {DAG_FILE} failed: {result}")
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
    args = parser.parse_args(argv)
    os.environ["LAKEPREP_PIPELINES_DIR"] = args.pipelines
    emit_result({"runs": probe(args.reps, args.warmup)})


if __name__ == "__main__":
    main()
