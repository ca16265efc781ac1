"""RESULTS.md's shape: the machine, then per section its table and the command that measured it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from benchmarks import report
from benchmarks.run import main

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "benchmarks" / "results.json"


def _sections(text: str) -> dict[str, str]:
    """Each `## ` heading of a rendered RESULTS.md and the text up to the next one."""
    parts = re.split(r"^(## .*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_each_committed_table_names_the_command_that_measured_it(tmp_path):
    results = json.loads(COMMITTED.read_text())
    report.write(results, tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "merged from" not in text and "The run of" not in text  # no history, no session notes
    header = text.split("## Targets", 1)[0]
    assert "- machine: " in header and "pyspark " in header and "- command:" not in header
    sections = _sections(text)
    measured = [h for h in sections if h.startswith("## `")]
    assert len(measured) == 9, measured
    for heading in measured:
        assert "\nMeasured by" in sections[heading], heading
    # The 16 M spark figures name the run that measured them, not the file's first run.
    run = results["scales"]["16000000"]["spark"]["run"]
    command = results["merged_commands"][run]
    spark = sections["## `spark`: preparation against the floor"]
    (line,) = [li for li in spark.splitlines() if li.startswith(f"- `{command}` on {run[:10]}: ")]
    assert "16,000,000 rows" in line.split(": ", 1)[1].split(", ")
    parse = sections["## `parse`: DAG parse time of `dags/lakeprep_datasets.py`"]
    started = results["merged_parts"]["dag_parse"]
    assert f"Measured by `{results['merged_commands'][started]}` on {started[:10]}." in parse


def test_a_table_from_several_runs_lists_each_run_and_what_it_measured():
    results = {
        "started": "2027-01-01T08:00:00+00:00",
        "command": "python -m benchmarks --rows 1000000",
        "merged_commands": {"2027-01-02T09:00:00+00:00": "python -m benchmarks --rows 4000000 --only spark"},
        "merged_parts": {"crossover": "2027-01-02T09:00:00+00:00"},
        "scales": {
            "4000000": {"spark": {"run": "2027-01-02T09:00:00+00:00"}},
            "1000000": {"spark": {}, "input": {}},
        },
        "crossover": {},
    }
    assert report.measured_by(results, ("spark",), ()) == [
        "",
        "Measured by:",
        "- `python -m benchmarks --rows 1000000` on 2027-01-01: 1,000,000 rows",
        "- `python -m benchmarks --rows 4000000 --only spark` on 2027-01-02: 4,000,000 rows",
    ]
    assert report.measured_by(results, ("input",), ()) == [
        "",
        "Measured by `python -m benchmarks --rows 1000000` on 2027-01-01.",
    ]
    assert report.measured_by(results, (), ("crossover",)) == [
        "",
        "Measured by `python -m benchmarks --rows 4000000 --only spark` on 2027-01-02.",
    ]
    assert report.measured_by(results, ("driver",), ("dag_parse",)) == []  # nothing measured


def test_a_merged_run_replaces_the_command_of_the_run_it_replaced(tmp_path):
    """`--report-only R --merge O` keeps the commands of the runs whose parts R still holds."""
    base = json.loads(COMMITTED.read_text())
    replaced = base["merged_parts"]["dag_parse"]
    assert replaced not in {
        p.get("run") for s in base["scales"].values() for k, p in s.items() if k != "data"
    }
    target = tmp_path / "results.json"
    target.write_text(json.dumps(base))

    def merge(started: str, command: str) -> dict:
        other = {
            "started": started,
            "command": command,
            "machine": base["machine"],
            "config": {"parts": ["parse"]},
            "scales": {},
            "dag_parse": base["dag_parse"],
        }
        (tmp_path / "other.json").write_text(json.dumps(other))
        main(["--report-only", str(target), "--merge", str(tmp_path / "other.json")])
        return json.loads(target.read_text())

    first = merge("2027-02-01T10:00:00+00:00", "python -m benchmarks --only parse --out first")
    assert first["merged_parts"]["dag_parse"] == "2027-02-01T10:00:00+00:00"
    assert replaced not in first["merged_commands"]  # its only part is measured anew
    second = merge("2027-02-02T10:00:00+00:00", "python -m benchmarks --only parse --out second")
    assert "2027-02-01T10:00:00+00:00" not in second["merged_commands"]
    parse = _sections((tmp_path / "RESULTS.md").read_text())[
        "## `parse`: DAG parse time of `dags/lakeprep_datasets.py`"
    ]
    assert "Measured by `python -m benchmarks --only parse --out second` on 2027-02-02." in parse
    assert "--out first" not in (tmp_path / "RESULTS.md").read_text()
