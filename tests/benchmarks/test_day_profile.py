"""The small day's profile (benchmarks/day_profile.py) on the fused DAG's real tasks.

A 300-row generated day through the tasks the fused DAG runs: the daily stages as one real
spark-submit under py-spy, whose every Spark job carries the stage that ran it (the
`lakeprep.stage` local property, `stage_entry.run_stage`) and whose breakdown accounts for its
sampled time; the window's stages as the task the DAG runs in the Airflow worker without
Spark, timed as a Python task, which writes the export.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from benchmarks import day_profile, event_log, generate
from tests.conftest import run_command

REPO = Path(__file__).resolve().parents[2]


def test_union_counts_overlapping_jobs_once():
    assert day_profile.union_s([(0, 1000), (500, 1500), (3000, 3500)]) == 2.0
    assert day_profile.union_s([(0, 2000), (100, 200)]) == 2.0
    assert day_profile.union_s([]) == 0


def test_classify_counts_the_driver_alone(tmp_path):
    # py-spy's raw lines: each sampled process with its ancestors, its thread, its frames.
    jobs = "lakeprep_jobs/fused.py"
    root = f'process 10:"python -m benchmarks.driver_start out {jobs} 0.02 spark-submit x/{jobs}"'
    launcher = f'process 11:"bash spark-class org.apache.spark.deploy.SparkSubmit x/{jobs}"'
    driver = f'process 12:"/venv/bin/python /repo/spark_jobs/{jobs} --plan [{{}}]"'
    home = 'process 13:"/venv/bin/python /spark/bin/find_spark_home.py"'
    in_driver = f"{root};{launcher};{driver};thread (1): MainThread;<module> (/repo/x/{jobs}:9)"
    lines = [
        f"{root};thread (1): MainThread;<module> (<string>:1);wait (subprocess.py:1) 900",  # the wrapper
        f"{root};{launcher};{home};thread (1): MainThread;<module> (find_spark_home.py:1) 7",
        f"{in_driver};start_session (/z/lakeprep_jobs/session.py:5) 120",
        f"{in_driver};run_stage (/z/lakeprep_jobs/stage_entry.py:134);run (/z/lakeprep_jobs/sample.py:40);"
        "collect (/p/py4j/java_gateway.py:1) 300",
        f"{in_driver};import (json.py:1) 30",
    ]
    samples = tmp_path / "py-spy.txt"
    samples.write_text("\n".join(lines) + "\n")
    got = day_profile.classify(samples)
    assert got["phases"] == {"session_start": 120, "other": 30}
    assert got["stages"] == {"sample": {"jvm": 300}}
    assert got["waits"]["sample"] == [("sample.py:40 run", 300)]


def _run_wrapper(tmp_path, command):
    out = tmp_path / "driver_start.json"
    argv = [sys.executable, "-m", "benchmarks.driver_start", str(out), day_profile.DRIVER_SCRIPT, "0.01"]
    started = time.monotonic()
    result = run_command([*argv, *command], cwd=REPO, timeout=60, check=False)
    written = json.loads(out.read_text())
    assert written["returncode"] == result.returncode  # py-spy exits 0 whatever its command did
    return result, written["driver_after_s"], time.monotonic() - started


def test_the_wrapper_times_the_launcher_until_a_descendant_runs_the_driver_script(tmp_path):
    # A launcher (bash) that takes 0.4 s, then a grandchild Python running a file named
    # like the driver, as spark-submit's JVM starts it; the exit code passes through.
    driver = tmp_path / day_profile.DRIVER_SCRIPT
    driver.parent.mkdir(parents=True)
    driver.write_text("import sys, time; time.sleep(0.3); sys.exit(3)\n")
    launcher = f"sleep 0.4; {sys.executable} {driver}; exit $?"
    result, after, wall = _run_wrapper(tmp_path, ["bash", "-c", launcher])
    assert result.returncode == 3, result.stderr
    assert 0.4 <= after < 0.4 + 0.5 and after < wall - 0.25  # seen while the driver ran


def test_the_wrapper_reports_no_driver_when_none_ran(tmp_path):
    # Another Python script (spark-submit's find_spark_home.py, say) is not the driver.
    other = tmp_path / "find_spark_home.py"
    other.write_text("import time; time.sleep(0.2)\n")
    result, after, _ = _run_wrapper(tmp_path, ["bash", "-c", f"{sys.executable} {other}"])
    assert result.returncode == 0, result.stderr
    assert after is None


def test_a_failed_submission_fails_the_profile_naming_its_exit_code(tmp_path):
    # py-spy exits 0 whatever its command did; the wrapper's record of the exit code is what
    # fails the profile, before anything reads the (missing) event log or samples.
    assert day_profile.py_spy() is not None, "py-spy is not installed (requirements-dev.txt)"
    submit = tmp_path / "spark-submit"
    submit.write_text("#!/bin/sh\necho 'Error: no such application' >&2\nexit 3\n")
    submit.chmod(0o755)
    folder = tmp_path / "profile"
    folder.mkdir()
    with pytest.raises(RuntimeError, match=r"the profiled submission failed \(exit code 3\)"):
        day_profile.profile_submission([str(submit), "app.py"], folder, ("validate",))


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_profile_of_a_small_day_accounts_for_every_stage_and_job(tmp_path):
    # py-spy is pinned in requirements-dev.txt: missing, the install is broken, so fail, not skip.
    assert day_profile.py_spy() is not None, "py-spy is not installed (requirements-dev.txt)"
    lake = tmp_path / "lake"
    generate.land(lake, 300, seed=5)
    env = {**os.environ, "LAKEPREP_BENCH_DIR": str(tmp_path / "work")}
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.day_profile",
        "--lake",
        str(lake),
        "--logs",
        str(tmp_path / "logs"),
        "--json",
        str(tmp_path / "profile.json"),
    ]
    daily, in_worker = "validate+preprocess+sample", "fit_transform+export_shards"
    for _attempt in (1, 2):
        result = run_command(cmd, cwd=REPO, env=env, timeout=900, check=False)
        assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
        profile = json.loads((tmp_path / "profile.json").read_text())
        # py-spy samples the driver from outside: on a loaded machine (a clean-clone suite in
        # two workers) it once caught no sample of a submission's stages at all. Profiled
        # again once; the second run's profile is judged whatever it shows.
        if list(profile[daily]["stages"]) == daily.split("+"):
            break
    assert list(profile) == [daily, in_worker]
    # The window's stages: one task in the worker, its execute timed inside its whole child.
    task = profile.pop(in_worker)
    assert task["kind"] == "python" and 0 < task["wall_s"] < task["process_wall_s"], task
    assert (lake / "export_shards" / "flights" / f"dt={generate.DS}" / "manifest.json").is_file()
    assert profile[daily]["kind"] == "spark"
    for name, sub in profile.items():
        assert list(sub["stages"]) == name.split("+"), name
        assert sub["untagged_jobs"] == 0, name  # every job names its stage
        # The launcher and the JVM before the driver, timed by the wrapper (a wall clock: a
        # difference of py-spy's per-process sample counts came out 0 under load).
        assert sub["session_start_s"] > 0 and 0 < sub["before_driver_s"] < sub["wall_s"], name
        assert (tmp_path / "logs" / name / "driver_start.json").is_file(), name
        parts = (
            sub["before_driver_s"]
            + sub["session_start_s"]
            + sub["session_stop_s"]
            + sub["driver_other_s"]
            + sum(st["wall_s"] for st in sub["stages"].values())
        )
        assert parts == pytest.approx(sub["sampled_s"], abs=0.1), name
        # Samples x interval is py-spy's clock, not the wall's: on a loaded machine it lags and
        # then catches up (a clean-clone run beside benchmarks: 49.07 s sampled in 48.02 s).
        # A double count would be twice the wall; a few percent is py-spy's timing.
        assert sub["sampled_s"] <= sub["wall_s"] * 1.05 + 1, name
        for stage, st in sub["stages"].items():
            assert st["jobs"] >= 1 and 0 < st["in_jobs_s"] <= st["wall_s"] + 0.5, (name, stage)
            # the waits name lakeprep's own lines
            assert st["longest_jvm_waits"] and all(".py:" in site for site, _ in st["longest_jvm_waits"])
        assert (tmp_path / "logs" / name / "py-spy.txt").stat().st_size > 0
        # The same event log by call site (`python -m benchmarks.event_log`): every job once,
        # the sites grouped and ranked by their seconds, lakeprep's own lines among them.
        jobs = event_log.job_times(tmp_path / "logs" / name / "events")
        assert len(jobs) == sum(st["jobs"] for st in sub["stages"].values()) + sub["untagged_jobs"], name
        # A job may run no task: adaptive execution gives a stage over an empty shuffle none
        # (preprocess's check for repeated ids on a day without any: the hashes grouped,
        # nothing after them). The others run at least one.
        assert all(j["seconds"] >= 0 and j["tasks"] >= 0 for j in jobs), name
        assert sum(j["tasks"] >= 1 for j in jobs) >= len(jobs) - 2, [
            (j["call_site"], j["tasks"]) for j in jobs
        ]
        sites = event_log.by_call_site(jobs)
        assert sum(s["jobs"] for s in sites) == len(jobs), name
        assert [s["seconds"] for s in sites] == sorted((s["seconds"] for s in sites), reverse=True), name
        assert any(stage in s["call_site"] for s in sites for stage in name.split("+")), sites
