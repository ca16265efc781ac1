"""`make run DATASET=<name> FROM=... TO=...`: the Makefile's rendering and the checks of
`lakeprep_airflow.run_dataset` before any Airflow run (no day is run here)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lakeprep_airflow import run_dataset

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "pipelines" / "flights.yaml"
PENGUINS = REPO / "tests" / "data" / "pipelines" / "penguins.yaml"


@pytest.fixture
def pipelines(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    shutil.copy(FLIGHTS, folder / FLIGHTS.name)
    shutil.copy(PENGUINS, folder / PENGUINS.name)
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(folder))
    return folder


def land(lake: Path, day: str, *, marker: bool = True) -> Path:
    partition = lake / "raw" / "flights" / f"dt={day}"
    partition.mkdir(parents=True)
    (partition / "part-00000.csv").write_text("year,month\n2013,1\n")
    if marker:
        (partition / "_SUCCESS").write_text("")
    return partition


def refused(capsys, *argv: str) -> str:
    assert run_dataset.main(list(argv)) == 2
    return capsys.readouterr().err


def test_an_unknown_dataset_is_refused_naming_it_and_listing_the_specs(pipelines, tmp_path, capsys):
    err = refused(capsys, "--dataset", "flight", "--from", "2013-01-01", "--lake", f"file://{tmp_path}")
    assert f"no dataset spec named 'flight': {pipelines}/flight.yaml does not exist" in err
    assert (
        f"the specs in {pipelines} (set LAKEPREP_PIPELINES_DIR for another folder): flights, penguins" in err
    )
    err = refused(capsys, "--dataset", "", "--from", "2013-01-01")
    assert "no dataset given: set DATASET=<name>" in err and "flights, penguins" in err


def test_a_broken_spec_is_refused_with_its_error(pipelines, capsys):
    (pipelines / "flights.yaml").write_text(FLIGHTS.read_text().replace("name: flights", "name: planes"))
    err = refused(capsys, "--dataset", "flights", "--from", "2013-01-01")
    assert "dataset 'flights' cannot run:" in err and "file name must match name 'planes'" in err


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        ("2013-1-1", "2013-01-02", "FROM '2013-1-1' must be a date YYYY-MM-DD"),
        ("2013-01-03", "2013-01-02", "FROM 2013-01-03 is after TO 2013-01-02"),
        ("2012-12-31", "2013-01-02", "2012-12-31 is outside its dates (start_date 2013-01-01 in"),
        ("2013-12-30", "2014-01-01", "2014-01-01 is outside its dates (end_date 2013-12-31 in"),
    ],
)
def test_days_outside_the_spec_or_out_of_order_are_refused(pipelines, capsys, first, last, message):
    assert message in refused(capsys, "--dataset", "flights", "--from", first, "--to", last)


def test_an_incomplete_raw_partition_is_refused_naming_it(pipelines, tmp_path, capsys):
    lake = tmp_path / "lake"
    land(lake, "2013-01-01")
    land(lake, "2013-01-02", marker=False)
    args = ["--dataset", "flights", "--from", "2013-01-01", "--to", "2013-01-03", "--lake", f"file://{lake}"]
    err = refused(capsys, *args)
    assert "dataset 'flights', 2013-01-02: the raw partition is not complete (needs _SUCCESS" in err
    assert f"file://{lake}/raw/flights/dt=2013-01-02: _SUCCESS missing, 1 data file(s)" in err
    assert "2013-01-03" not in err  # the first incomplete day is named
    assert "no lake root" in refused(capsys, "--dataset", "flights", "--from", "2013-01-01", "--lake", "")


def test_a_dry_run_prints_one_airflow_dags_test_per_day(pipelines, tmp_path, capsys, monkeypatch):
    lake = tmp_path / "lake"
    for day in ("2013-01-30", "2013-01-31", "2013-02-01"):
        land(lake, day)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    args = ["--dataset", "flights", "--from", "2013-01-30", "--to", "2013-02-01", "--lake", f"file://{lake}"]
    assert run_dataset.main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"airflow dags test lakeprep_flights {day} > {tmp_path}/home/run-flights-{day}.log"
        for day in ("2013-01-30", "2013-01-31", "2013-02-01")
    ]


def test_a_failed_day_prints_its_log_tail_and_stops(tmp_path, capsys):
    failing = run_dataset.DayRun("2013-01-01", ["bash", "-c", "seq 1 100; exit 3"], tmp_path / "a" / "d.log")
    assert run_dataset._run(failing) is False
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [*map(str, range(41, 101)), f"run 2013-01-01 failed (exit 3); full log: {failing.log}"]
    passing = run_dataset.DayRun(
        "2013-01-02", ["bash", "-c", "echo x; echo 'DagRun Finished: state=success'"], tmp_path / "p.log"
    )
    assert run_dataset._run(passing) is True
    assert capsys.readouterr().out.splitlines()[-1] == "DagRun Finished: state=success"


def make_dry_run(*args: str) -> str:
    """What `make -n` would run (the recipes printed, none executed but recursive make's)."""
    own = ("DATASET", "FROM", "TO", "DEMO_FROM", "DEMO_TO", "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT")
    env = {k: v for k, v in os.environ.items() if k not in own}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_and_make_demo_call_the_same_command():
    run = make_dry_run("run", "DATASET=penguins", "FROM=2007-11-16", "TO=2007-11-27")
    assert '-m lakeprep_airflow.run_dataset --dataset "penguins" --from "2007-11-16" --to "2007-11-27"' in run
    assert f'--lake "file://{REPO}/.lake" --spark-cache {REPO}/.venv/lakeprep-cache' in run
    one_day = make_dry_run("run", "DATASET=flights", "FROM=2013-01-05")
    assert '--dataset "flights" --from "2013-01-05" --to "2013-01-05"' in one_day
    demo = make_dry_run("demo")
    assert "-m lakeprep_airflow.demo_data" in demo
    assert '-m lakeprep_airflow.run_dataset --dataset "flights" --from "2013-01-01" --to "2013-01-03"' in demo
