"""The class-data archive that halves spark-submit's start-up (lakeprep_airflow.spark_startup)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from lakeprep_airflow import spark_startup


def _fake_spark(root: Path, jars: dict[str, int]) -> Path:
    (root / "jars").mkdir(parents=True)
    for name, size in jars.items():
        (root / "jars" / name).write_bytes(b"x" * size)
    return root


def test_the_key_follows_sparks_jars(tmp_path):
    home = _fake_spark(tmp_path / "a", {"spark-core.jar": 10, "b.jar": 3})
    one = spark_startup.archive_key(home)
    assert spark_startup.archive_key(home) == one
    upgraded = spark_startup.archive_key(_fake_spark(tmp_path / "c", {"spark-core.jar": 11, "b.jar": 3}))
    # A reinstall rewrites the same jars: the JVM refuses the archive on a new mtime.
    os.utime(home / "jars" / "b.jar", ns=(0, 1_000_000_000))
    reinstalled = spark_startup.archive_key(home)
    assert len({one, upgraded, reinstalled}) == 3


def test_an_existing_archive_is_reused_without_a_dump(tmp_path):
    home = _fake_spark(tmp_path / "spark", {"spark-core.jar": 1})  # no bin/spark-submit: a dump fails
    archive = tmp_path / "cache" / f"spark-cds-{spark_startup.archive_key(home)}.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    assert spark_startup.ensure_archive(tmp_path / "cache", home) == archive
    with pytest.raises(FileNotFoundError):  # another Spark: its archive must be dumped
        spark_startup.ensure_archive(tmp_path / "cache", _fake_spark(tmp_path / "other", {"x.jar": 2}))


def test_the_default_folder_is_the_users_own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert spark_startup.default_folder() == tmp_path / "lakeprep"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert spark_startup.default_folder() == Path.home() / ".cache" / "lakeprep"


@pytest.mark.integration
def test_the_runs_spark_submits_map_the_archive(tmp_path):
    """The suite's own options (tests/conftest.py): a driver JVM maps Spark's classes from them.

    `-Xshare:on` makes the JVM fail instead of silently loading from the jars when the
    archive does not fit its class path.
    """
    options = os.environ["SPARK_SUBMIT_OPTS"]
    archive = Path(re.search(r"-XX:SharedArchiveFile=(\S+)", options).group(1))
    assert archive.is_file() and archive.stat().st_size > 10_000_000
    job = tmp_path / "job.py"
    job.write_text(
        "from pyspark.sql import SparkSession\nSparkSession.builder.getOrCreate().range(3).count()\n"
    )
    loads = tmp_path / "class-load.txt"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xshare:on -Xlog:class+load:file={loads}"}
    home = spark_startup.spark_home()
    done = subprocess.run(
        [
            str(home / "bin" / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(job),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = loads.read_text().splitlines()
    shared = sum("source: shared objects file (top)" in line for line in lines)
    from_jars = sum("source: jar:" in line or "source: file:" in line for line in lines)
    assert shared > 5000 and from_jars < shared / 20, (shared, from_jars)
