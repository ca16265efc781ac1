"""The floor of the preparation: read the raw partition, write it as zstd Parquet. Nothing else.

    spark-submit ... benchmarks/jobs/floor.py --input <raw partition> --output <folder> --options JSON

Same reader as validate (its CSV defaults under the spec's options, every column a
string) and the same session settings, no typing, no checks, no transforms: the cost of
one pass over the data in and one out.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    from pyspark.sql import SparkSession

    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--options", required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.appName("lakeprep-bench-floor").getOrCreate()
    try:
        frame = spark.read.options(**json.loads(args.options)).csv(args.input)
        frame.write.mode("overwrite").option("compression", "zstd").parquet(args.output)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
