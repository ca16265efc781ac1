"""The benchmark's `driver` part: the driver measured apart from its executor on the cluster.

`python -m benchmarks --only driver` on a 300-row generated day against the loopback
standalone cluster (the session's, reused and left running): every submission is
sampled as the driver's own process tree while the worker's executor is sampled apart,
and the stages account for the same rows as the fused submissions.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import run_command
from tests.integration.conftest import cluster_module

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
ROWS = 300
# A JVM's resident memory is at least this once it has run a Spark job; far below it,
# what was sampled is not a JVM.
JVM_MB = 100


@pytest.mark.timeout(900)
def test_the_driver_part_samples_each_driver_and_its_executor_apart(hdfs_spark_cluster, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "LAKEPREP_BENCH_DIR": str(tmp_path / "work")}
    cmd = [sys.executable, "-m", "benchmarks", "--only", "driver", "--rows", str(ROWS)]
    cmd += ["--reps", "1", "--warmup", "0", "--out", str(out)]
    result = run_command(cmd, cwd=REPO, env=env, timeout=900, check=False)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    part = json.loads((out / "results.json").read_text())["scales"][str(ROWS)]["driver"]
    port = cluster_module.Ports.from_env().spark_master
    assert part["master"] == f"spark://127.0.0.1:{port}"
    assert part["same_row_counts"] is True  # five stages and two fused submissions alike
    (run,) = part["runs"]
    submissions = [*run["stages"].values(), *run["fused"]["submissions"].values()]
    assert len(submissions) == 7
    for sub in submissions:
        # The driver's own tree (launcher, driver JVM, Python driver), and an executor JVM
        # under the worker: in local mode there would be none there to sample.
        assert sub["peak_rss_mb"] > JVM_MB and sub["executor_peak_rss_mb"] > JVM_MB, sub
    assert run["stages"]["validate"]["rows_in"] == ROWS
    # The cluster the session started is left as it was found: still up.
    assert all(row["up"] for row in cluster_module.status().values())
    text = (out / "RESULTS.md").read_text()
    assert "## `driver`: the driver's memory alone (client mode on a standalone cluster)" in text
    assert f"| {ROWS:,} | {part['staged_driver_peak_rss_mb']['median']:.0f} MB |" in text
