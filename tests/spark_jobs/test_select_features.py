from __future__ import annotations

import json
import statistics

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import common, select_features
from lakeprep_jobs.select_features import SelectParams

SCHEMA = (
    "id string, label int, num__const double, num__signal double, "
    "cat__one int, cat__two int, txt__pad array<int>, txt__words array<int>"
)
ROWS = [
    ("a", 0, 0.5, -1.2, 7, 0, [0, 0, 0], [3, 9, 0]),
    ("b", 1, 0.5, 0.1, 7, 5, [0, 0, 0], [0, 0, 0]),
    ("c", 0, 0.5, 1.1, 7, 6, [0, 0, 0], [4, 0, 0]),
    ("d", 1, 0.5, 0.0, 7, 5, [0, 0, 0], [0, 0, 0]),
]


def land(spark, tmp_path, rows=ROWS, schema=SCHEMA) -> str:
    part = f"file://{tmp_path}/preprocess/dt=2013-01-01"
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(part)
    return part


def test_constant_numeric_dropped_and_informative_kept(spark):
    df = spark.createDataFrame(ROWS, SCHEMA)
    kept = select_features.numeric_keep(df, ["num__const", "num__signal"], min_variance=1e-6)
    assert kept == ["num__signal"]


def test_variance_threshold_is_exclusive_and_configurable(spark):
    # num__signal has sample variance (1.44 + 0.01 + 1.21 + 0) / 3 = 0.8867; a higher
    # threshold drops it too.
    df = spark.createDataFrame(ROWS, SCHEMA)
    assert select_features.numeric_keep(df, ["num__const", "num__signal"], 0.88) == ["num__signal"]
    assert select_features.numeric_keep(df, ["num__const", "num__signal"], 0.89) == []


def test_single_value_categorical_and_all_padding_text_are_uninformative(spark):
    df = spark.createDataFrame(ROWS, SCHEMA)
    informative = select_features.informative_other(df, ["cat__one", "cat__two"], ["txt__pad", "txt__words"])
    assert informative == {"cat__one": False, "cat__two": True, "txt__pad": False, "txt__words": True}


def test_every_feature_dropped_raises(spark, tmp_path):
    rows = [(r[0], r[1], r[2], 3.0, r[4], 1, r[6], [0, 0, 0]) for r in ROWS]
    src = land(spark, tmp_path, rows=rows)
    out = tmp_path / "select_features" / "dt=2013-01-01"
    with pytest.raises(ValueError, match="every feature would be dropped") as err:
        select_features.run(spark, [src], f"file://{out}", SelectParams())
    message = str(err.value)
    for column in ("num__const", "num__signal", "cat__one", "cat__two", "txt__pad", "txt__words"):
        assert column in message
    assert "dt=2013-01-01" in message
    assert not out.exists()


def pca_frame(spark):
    """num__a and num__b are perfectly correlated (b = 3a + 1); num__c is small, independent noise."""
    rows = []
    for i in range(40):
        a = float(i % 10)
        c = 0.1 if (i * 7) % 3 == 0 else -0.1
        rows.append((f"r{i}", i % 2, a, 3 * a + 1, c, i % 4))
    return spark.createDataFrame(
        rows, "id string, label int, num__a double, num__b double, num__c double, cat__k int"
    )


def test_pca_on_correlated_columns(spark):
    df = pca_frame(spark)
    out, explained = select_features.project_pca(df, ["num__a", "num__b", "num__c"], 2)

    assert out.columns == ["id", "label", "cat__k", "num__pc1", "num__pc2"]
    assert len(explained) == 2
    assert sum(explained) <= 1 + 1e-9
    assert explained[0] > 0.99 and explained[0] > explained[1] > 0
    # Rank 2 data: two components explain everything.
    assert sum(explained) == pytest.approx(1, abs=1e-9)
    rows = out.collect()
    # pc1 is the a/b direction: (almost) perfectly correlated with a, up to sign.
    a = [float(int(r["id"][1:]) % 10) for r in rows]
    assert abs(statistics.correlation(a, [r["num__pc1"] for r in rows])) > 0.999


def test_pca_with_more_components_than_columns_fails(spark):
    with pytest.raises(ValueError, match="pca_components 3 exceeds the 2 numeric features kept"):
        select_features.project_pca(pca_frame(spark), ["num__a", "num__b"], 3)


def test_run_end_to_end(spark, tmp_path):
    src = land(spark, tmp_path)
    out_dir = tmp_path / "select_features" / "dt=2013-01-01"
    report = select_features.run(spark, [src], f"file://{out_dir}", SelectParams(min_variance=1e-6))

    assert report["dropped"] == {
        "num__const": "variance <= 1e-06",
        "cat__one": "single category",
        "txt__pad": "no tokens",
    }
    assert report["kept"] == ["num__signal", "cat__two", "txt__words"]
    assert report["rows_in"] == report["rows_out"] == 4
    assert json.loads((out_dir / common.REPORT_NAME).read_text()) == report
    out = spark.read.parquet(f"file://{out_dir}")
    expected = spark.createDataFrame(ROWS, SCHEMA).select(
        "id", "label", "num__signal", "cat__two", "txt__words"
    )
    assertDataFrameEqual(out, expected)


def test_run_with_pca_records_explained_variance(spark, tmp_path):
    src = f"file://{tmp_path}/preprocess/dt=2013-01-01"
    pca_frame(spark).coalesce(1).write.parquet(src)
    out = f"file://{tmp_path}/select_features/dt=2013-01-01"
    report = select_features.run(spark, [src], out, SelectParams(pca_components=2))

    assert report["kept"] == ["cat__k", "num__pc1", "num__pc2"]
    assert len(report["pca_explained_variance"]) == 2
    assert report["pca_explained_variance"][0] > 0.99
    assert spark.read.parquet(out).columns == ["id", "label", "cat__k", "num__pc1", "num__pc2"]


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src = land(spark, tmp_path)
    out = f"file://{tmp_path}/select_features/dt=2013-01-01"
    first_report = select_features.run(spark, [src], out, SelectParams())
    first = spark.createDataFrame(spark.read.parquet(out).collect(), spark.read.parquet(out).schema)

    second_report = select_features.run(spark, [src], out, SelectParams())

    assert second_report == first_report
    assertDataFrameEqual(spark.read.parquet(out), first)
    assert spark.read.parquet(out).count() == 4
    assert not list((tmp_path / "select_features" / "_staging").iterdir())
