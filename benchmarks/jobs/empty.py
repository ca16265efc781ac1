"""One empty submission: start the session, stop it (the start-up every stage pays)."""

from __future__ import annotations


def main() -> None:
    from pyspark.sql import SparkSession

    SparkSession.builder.appName("lakeprep-bench-empty").getOrCreate().stop()


if __name__ == "__main__":
    main()
