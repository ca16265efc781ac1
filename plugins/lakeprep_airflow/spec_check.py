"""Check dataset specs before any run: what the DAG file would check, from a shell.

    python -m lakeprep_airflow.spec_check pipelines/*.yaml

Each file gets the full validation that parsing the DAG and starting a task apply (JSON
Schema, names and roles, header names and null tokens, the time zone, every derived and
reference expression parsed with sqlglot, derived ones resolved against the contract
and translated for serving), then a summary of what was checked and any warnings
(`warn`: valid, but validate will refuse a file holding raw names that differ only in
case). The exit status is 0 when every file is valid, 1 when any is not (each error
names the file and the field), 2 when no file was given or found. Without arguments it
checks the pipelines folder (`$LAKEPREP_PIPELINES_DIR`, else `<repo>/pipelines`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lakeprep_airflow.spec import DatasetSpec, SpecError, discover_specs, load_spec


def describe(spec: DatasetSpec) -> list[str]:
    """What was checked in one spec, one line per part, for a person reading the output."""
    data = spec.data
    source = spec.source
    columns = []
    for c in data["columns"]:
        header = f" <- {c['raw_name']!r}" if "raw_name" in c else ""
        columns.append(f"{c['name']}{header} ({c['type']}, {c['role']})")
    tokens = source.get("null_tokens", [])
    lines = [
        f"source: {source['format']} at {source['uri']}" + (f", null tokens {tokens}" if tokens else ""),
        f"time_zone: {data.get('time_zone', 'UTC')}",
        f"columns ({len(columns)}): " + ", ".join(columns),
        f"derived ({len(data['derived'])}): "
        + (", ".join(f"{c['name']} ({c['role']})" for c in data["derived"]) or "none")
        + " [parsed, resolved, translated to DuckDB]",
    ]
    refs = data.get("references", [])
    lines.append(
        f"references ({len(refs)}): "
        + (
            ", ".join(f"{r['name']} on {r['join_keys']} ({len(r['columns'])} column(s))" for r in refs)
            or "none"
        )
    )
    lines.append(f"label: {data['label']['column']} in {data['label']['classes']}")
    for stage, knobs in spec.stages.items():
        lines.append(f"stages.{stage}: " + (", ".join(f"{k}={v!r}" for k, v in knobs.items()) or "defaults"))
    return lines


def warnings(spec: DatasetSpec) -> list[str]:
    """What is valid but likely to fail at run time, one line each.

    Raw names that differ only in case (surrounding whitespace is refused outright):
    validate refuses a file holding both, since Spark resolves names without case and
    validate could not tell which header holds which column.
    """
    by_key: dict[str, list[str]] = {}
    for i, col in enumerate(spec.data["columns"]):
        header = col.get("raw_name", col["name"])
        by_key.setdefault(header.strip().casefold(), []).append(
            f"columns.{i} ({col['name']}) reads {header!r}"
        )
    return [
        f"{'; '.join(reads)}: these differ only in case, and validate refuses a file holding "
        "both (it cannot tell them apart); have the feed name them apart"
        for reads in by_key.values()
        if len(reads) > 1
    ]


def check(paths: Sequence[Path]) -> tuple[int, list[str]]:
    """(number of invalid files, report lines) for `paths`."""
    failed = 0
    out: list[str] = []
    for path in paths:
        try:
            spec = load_spec(path)
        except SpecError as err:
            failed += 1
            out.append(f"FAIL {err}")
            continue
        out.append(f"ok   {path}: dataset {spec.name!r} (DAG {spec.dag_id})")
        out += [f"     {line}" for line in describe(spec)]
        out += [f"warn {path}: {line}" for line in warnings(spec)]
    return failed, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_airflow.spec_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("specs", nargs="*", type=Path, help="spec files (default: the pipelines folder)")
    args = parser.parse_args(argv)
    paths = args.specs or discover_specs()
    if not paths:
        print("no dataset specs given or found", file=sys.stderr)
        return 2
    failed, lines = check(paths)
    print("\n".join(lines))
    print(f"{len(paths) - failed} of {len(paths)} spec(s) valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
