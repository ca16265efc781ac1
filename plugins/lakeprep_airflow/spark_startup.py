"""A faster `spark-submit` start-up for small partitions: JVM options with a class-data archive.

A small day's Spark time is almost all JVM start-up: the driver loads some 8,000 classes
from Spark's jars (and verifies them) before the first row is read. A dynamic
class-data-sharing (CDS) archive of those classes, dumped once by a short job that reads
CSV and writes Parquet the way the stages do, lets later JVMs map them instead. With the
client JIT only (`-XX:TieredStopAtLevel=1`) and the serial collector, an empty
submission on 2 cores went from 10.4 s to 5.0 s (docs/PIPELINE.md, "Faster JVM start-ups").

The options go into `SPARK_SUBMIT_OPTS`, which Spark's launcher adds to the driver JVM
(the spark-submit JVM in local and client mode); executors on a cluster are untouched.
They suit small partitions: the client JIT gives up peak speed on long hot loops, so a
deployment that prepares millions of rows a day leaves them off. The archive is keyed by
the Java runtime and Spark's jars (as the JVM checks them); a JVM whose class path does
not start with the dumped one ignores the archive silently, so a stale or foreign
archive costs speed, never correctness.

    python -m lakeprep_airflow.spark_startup [--cache-dir DIR]   # prints the options
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Quick start-up over peak speed: the client compiler only, the serial collector.
FAST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
DUMP_TIMEOUT_S = 600

# Loads what a stage loads: CSV parsing, expressions (codegen), an aggregation, Parquet.
_TRAINING_JOB = """
import sys
from pyspark.sql import SparkSession, functions as F
out = sys.argv[1]
spark = SparkSession.builder.getOrCreate()
df = spark.range(200).select(F.col("id"), (F.col("id") % 3).alias("k"), F.rand(1).alias("x"))
df.write.mode("overwrite").option("header", "true").csv(out + "/csv")
raw = spark.read.option("header", "true").csv(out + "/csv")
typed = raw.select(F.col("id").cast("long"), F.col("k").cast("int"), F.col("x").cast("double"))
typed.groupBy("k").agg(F.count("*"), F.avg("x")).collect()
typed.write.mode("overwrite").option("compression", "zstd").parquet(out + "/parquet")
spark.read.parquet(out + "/parquet").filter("x > 0.5").count()
spark.stop()
"""


def spark_home() -> Path:
    """SPARK_HOME, or the pip-installed pyspark's folder (what spark-submit then uses)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def archive_key(home: Path) -> str:
    """A digest of the Java runtime's version and Spark's jars (names, sizes, mtimes).

    The JVM checks each class-path jar's size and modification time against the dump and
    maps nothing when one differs: a reinstalled pyspark (same jars, new mtimes) needs
    a new archive.
    """
    version = subprocess.run([_java(), "-version"], capture_output=True, text=True, timeout=60)
    digest = hashlib.sha256(version.stderr.encode())
    for jar in sorted((home / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def default_folder() -> Path:
    """The user's own cache (`$XDG_CACHE_HOME/lakeprep`, else `~/.cache/lakeprep`).

    Not a shared temporary folder: a JVM maps classes from the archive, so only its
    owner may be able to write it.
    """
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lakeprep"


def ensure_archive(folder: Path | None = None, home: Path | None = None) -> Path:
    """The class-data archive for this Java and Spark, dumped first if there is none yet.

    The dump is one short spark-submit (about twice an ordinary start-up); it is written
    under a temporary name and renamed, so concurrent callers never map a partial file.
    """
    home = home or spark_home()
    folder = folder or default_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    archive = folder / f"spark-cds-{archive_key(home)}.jsa"
    if archive.is_file():
        return archive
    with tempfile.TemporaryDirectory(prefix="lakeprep-cds-", dir=folder) as work:
        job = Path(work) / "cds_training_job.py"
        job.write_text(_TRAINING_JOB)
        partial = Path(work) / archive.name
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
            "SPARK_SUBMIT_OPTS": " ".join((f"-XX:ArchiveClassesAtExit={partial}", *FAST_JVM_OPTIONS)),
        }
        argv = [
            str(home / "bin" / "spark-submit"),
            *("--master", "local[1]", "--conf", "spark.ui.enabled=false"),
            *("--conf", "spark.hadoop.fs.defaultFS=file:///"),
            str(job),
            str(Path(work) / "out"),
        ]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
        if done.returncode != 0 or not partial.is_file():
            raise RuntimeError(
                f"dumping the Spark class-data archive failed (exit {done.returncode}): "
                f"{' '.join(argv)}\n{done.stderr[-2000:]}"
            )
        os.replace(partial, archive)
    return archive


def java_options(archive: Path) -> str:
    """The driver JVM options (for SPARK_SUBMIT_OPTS) that map `archive`."""
    return " ".join((f"-XX:SharedArchiveFile={archive}", *FAST_JVM_OPTIONS))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="the archive's folder (~/.cache/lakeprep)"
    )
    args = parser.parse_args(argv)
    print(java_options(ensure_archive(args.cache_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
