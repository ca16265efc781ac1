from __future__ import annotations

import json
import statistics

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import common, preprocess
from lakeprep_jobs.preprocess import PreprocessParams

MAIN_SCHEMA = "flight_id string, delayed int, hour int, distance double, carrier string, model string"
# Row "d" has 10 tokens in `model`, more than text_max_tokens=4; row "c" has no weather at hour 7.
MAIN_ROWS = [
    ("a", 0, 5, 100.0, "AA", "Boeing 737-800"),
    ("b", 1, 6, 200.0, "UA", "AIRBUS a320"),
    ("c", 0, 7, None, "AA", None),
    ("d", 1, 5, 500.0, None, "one two three four five six seven eight nine ten"),
]
# CSV-like: every value a string. Hour 5 is listed twice (duplicate join key).
WEATHER_CSV = "hour,temp\n5,10\n5,10\n6,20\n"


def weather_ref(uri: str) -> dict:
    return {
        "name": "weather",
        "uri": uri,
        "format": "csv",
        "options": {"header": "true"},
        "join_keys": ["hour"],
        "columns": [{"name": "temp", "expr": "CAST(temp AS DOUBLE)"}],
    }


def params(ref_uri: str, **kw) -> PreprocessParams:
    base = dict(
        id_column="flight_id",
        label_column="delayed",
        numeric=["distance", "temp"],
        categorical=["carrier"],
        text=["model"],
        references=[weather_ref(ref_uri)],
        categorical_buckets=64,
        text_vocab_size=128,
        text_max_tokens=4,
    )
    base.update(kw)
    return PreprocessParams(**base)


def land(spark, tmp_path, rows=MAIN_ROWS, schema=MAIN_SCHEMA) -> tuple[str, str]:
    """The validated partition (Parquet) and the weather reference (CSV) as file:// URIs."""
    part = f"file://{tmp_path}/validate/dt=2013-01-01"
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(part)
    ref = tmp_path / "reference" / "weather"
    ref.mkdir(parents=True)
    (ref / "weather.csv").write_text(WEATHER_CSV)
    return part, f"file://{ref}"


# ------------------------------------------------------------------------------ joins


def test_duplicate_reference_keys_do_not_multiply_rows_and_unmatched_rows_show(spark):
    main = spark.createDataFrame([(1, "x"), (1, "y"), (2, "z"), (3, "w")], "k int, v string")
    # String keys, as a CSV reference without a schema gives them; key "1" appears three times.
    table = spark.createDataFrame(
        [("1", "one"), ("1", "uno"), ("1", "eins"), ("2", "two"), ("9", "nine")], "k string, name string"
    )
    ref = {"name": "names", "join_keys": ["k"], "columns": [{"name": "label_name", "expr": "name"}]}

    rows = preprocess.join_references(main, [(ref, table)]).collect()

    assert sorted(r["v"] for r in rows) == ["w", "x", "y", "z"]
    assert {r["v"]: r["_matched__names"] for r in rows} == {"x": True, "y": True, "z": True, "w": None}
    names = {r["v"]: r["label_name"] for r in rows}
    assert names["z"] == "two" and names["w"] is None
    assert names["x"] in ("one", "uno", "eins") and names["x"] == names["y"]


def test_join_keys_are_cast_to_the_main_tables_type(spark):
    main = spark.createDataFrame([(7, 2013), (8, 2013)], "hour int, year bigint")
    # "07" and "7" differ as strings but are the same hour: de-duplicated after the cast,
    # so hour 7 still gets one reference row.
    table = spark.createDataFrame(
        [("7", "2013", "1.5"), ("07", "2013", "1.5"), ("8", "2012", "9")],
        "hour string, year string, t string",
    )
    ref = {
        "name": "w",
        "join_keys": ["hour", "year"],
        "columns": [{"name": "t", "expr": "CAST(t AS DOUBLE)"}],
    }

    joined = preprocess.join_references(main, [(ref, table)])

    assert dict(joined.dtypes)["hour"] == "int" and dict(joined.dtypes)["year"] == "bigint"
    assertDataFrameEqual(
        joined,
        spark.createDataFrame(
            [(7, 2013, 1.5, True), (8, 2013, None, None)],
            "hour int, year bigint, t double, _matched__w boolean",
        ),
    )


# ------------------------------------------------------------------------ categoricals


def test_categorical_ids_are_stable_across_frames_zero_for_null_and_in_range(spark):
    buckets = 5
    first = spark.createDataFrame([(f"v{i}",) for i in range(200)] + [(None,)], "c string")
    second = spark.createDataFrame([("v17",), (None,), ("v3",), ("v199",)], "c string").repartition(3)

    ids1 = {r["c"]: r["cat__c"] for r in preprocess.categorical_ids(first, ["c"], buckets).collect()}
    ids2 = {r["c"]: r["cat__c"] for r in preprocess.categorical_ids(second, ["c"], buckets).collect()}

    assert ids1[None] == 0 and ids2[None] == 0
    assert ids2 == {k: ids1[k] for k in ids2}
    values = {v for k, v in ids1.items() if k is not None}
    # 200 values over 4 non-missing ids: every id in [1, buckets) is used, none outside.
    assert values == {1, 2, 3, 4}


def test_categorical_id_of_a_number_matches_its_string_form(spark):
    ints = spark.createDataFrame([(42,)], "c int")
    strings = spark.createDataFrame([("42",)], "c string")
    a = preprocess.categorical_ids(ints, ["c"], 1024).first()["cat__c"]
    b = preprocess.categorical_ids(strings, ["c"], 1024).first()["cat__c"]
    assert a == b and 1 <= a < 1024


# ------------------------------------------------------------------------------- text


def test_text_ids_have_exactly_max_tokens_entries_zero_padded(spark):
    df = spark.createDataFrame(
        [
            ("short", "Hello, world"),
            ("case", "HELLO"),
            ("long", "a b c d e f"),
            ("empty", ""),
            ("null", None),
        ],
        "k string, t string",
    )
    out = {r["k"]: r for r in preprocess.text_ids(df, ["t"], vocab=50, max_tokens=4).collect()}

    assert {k: len(r["txt__t"]) for k, r in out.items()} == dict.fromkeys(out, 4)
    assert out["short"]["txt__t"][2:] == [0, 0]
    assert all(1 <= i < 50 for i in out["short"]["txt__t"][:2])
    assert out["case"]["txt__t"] == [out["short"]["txt__t"][0], 0, 0, 0]  # lower-cased
    assert all(1 <= i < 50 for i in out["long"]["txt__t"])
    assert out["empty"]["txt__t"] == [0, 0, 0, 0] and out["null"]["txt__t"] == [0, 0, 0, 0]
    assert {k: r["_ntok__t"] for k, r in out.items()} == {
        "short": 2,
        "case": 1,
        "long": 6,
        "empty": 0,
        "null": 0,
    }


# ---------------------------------------------------------------------------- numerics


def test_numerics_are_imputed_then_standardized(spark):
    df = spark.createDataFrame([("a", 1.0), ("b", 2.0), ("c", None), ("d", 6.0)], "k string, x double")
    model = preprocess.fit_numeric(df, ["x"], "mean")
    out = {r["k"]: r["num__x"] for r in preprocess.apply_numeric(df, model, ["x"]).collect()}

    assert set(out) == {"a", "b", "c", "d"}
    assert statistics.fmean(out.values()) == pytest.approx(0, abs=1e-9)
    assert statistics.stdev(out.values()) == pytest.approx(1)
    assert out["c"] == pytest.approx(0, abs=1e-12)  # filled with the mean, so exactly average
    state = preprocess.numeric_state(model, ["x"])["x"]
    assert state["fill"] == pytest.approx(3.0)
    assert state["mean"] == pytest.approx(3.0)
    assert state["std"] == pytest.approx(statistics.stdev([1.0, 2.0, 3.0, 6.0]))
    assert out["d"] == pytest.approx((6.0 - 3.0) / statistics.stdev([1.0, 2.0, 3.0, 6.0]))


def test_integer_numerics_are_filled_with_the_recorded_fractional_mean(spark):
    # The recorded fill is what serving applies from _transform.json; training must apply
    # the same value, not the fill truncated to the column's integer type.
    df = spark.createDataFrame([("a", 1), ("b", 2), ("c", None), ("d", 4)], "k string, x int")
    model = preprocess.fit_numeric(df, ["x"], "mean")
    out = {r["k"]: r["num__x"] for r in preprocess.apply_numeric(df, model, ["x"]).collect()}
    state = preprocess.numeric_state(model, ["x"])["x"]

    assert state["fill"] == pytest.approx(7 / 3)
    assert state["mean"] == pytest.approx(7 / 3)
    assert out["c"] == pytest.approx(0, abs=1e-12)
    assert state["std"] == pytest.approx(statistics.stdev([1, 2, 7 / 3, 4]))


# ---------------------------------------------------------------------------- run()


def test_run_end_to_end(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    out_dir = tmp_path / "preprocess" / "dt=2013-01-01"
    report = preprocess.run(spark, [src], f"file://{out_dir}", params(ref_uri))

    assert report["rows_in"] == 4 and report["rows_out"] == 4
    assert report["reference_unmatched"] == {"weather": 1}
    assert report["text_truncated"] == {"model": 1}
    assert json.loads((out_dir / common.REPORT_NAME).read_text()) == report

    out = spark.read.parquet(f"file://{out_dir}")
    assert out.columns == ["id", "label", "num__distance", "num__temp", "cat__carrier", "txt__model"]
    assert dict(out.dtypes)["txt__model"] == "array<int>"
    rows = {r["id"]: r for r in out.collect()}
    assert {k: r["label"] for k, r in rows.items()} == {"a": 0, "b": 1, "c": 0, "d": 1}
    assert rows["d"]["cat__carrier"] == 0 and rows["a"]["cat__carrier"] == rows["c"]["cat__carrier"] > 0
    assert [len(r["txt__model"]) for r in rows.values()] == [4, 4, 4, 4]
    assert rows["c"]["txt__model"] == [0, 0, 0, 0]

    distance = [r["num__distance"] for r in rows.values()]
    assert statistics.fmean(distance) == pytest.approx(0, abs=1e-9)
    assert statistics.stdev(distance) == pytest.approx(1)
    assert rows["c"]["num__distance"] == pytest.approx(0, abs=1e-12)  # the imputed null

    transform = json.loads((out_dir / "_transform.json").read_text())
    # distance: fill = mean of 100, 200, 500; temp (from the reference): 10, 20, 10 matched.
    assert transform["numeric"]["distance"]["fill"] == pytest.approx(800 / 3)
    assert transform["numeric"]["distance"]["mean"] == pytest.approx(800 / 3)
    assert transform["numeric"]["distance"]["std"] == pytest.approx(
        statistics.stdev([100, 200, 800 / 3, 500])
    )
    assert transform["numeric"]["temp"]["fill"] == pytest.approx(40 / 3)
    assert transform["text"]["max_tokens"] == 4 and transform["categorical"]["buckets"] == 64
    assert (out_dir / "_model" / "metadata").is_dir()
    assert (out_dir / "_model" / "stages").is_dir()


def test_entirely_null_numeric_column_fails_naming_it(spark, tmp_path):
    rows = [(k, lbl, h, None, c, m) for k, lbl, h, _, c, m in MAIN_ROWS]
    src, ref_uri = land(spark, tmp_path, rows=rows)
    out = tmp_path / "preprocess" / "dt=2013-01-01"
    with pytest.raises(ValueError, match=r"numeric column\(s\) \['distance'\] are entirely null") as err:
        preprocess.run(spark, [src], f"file://{out}", params(ref_uri))
    assert "dt=2013-01-01" in str(err.value)
    assert not out.exists()


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    out = f"file://{tmp_path}/preprocess/dt=2013-01-01"
    first_report = preprocess.run(spark, [src], out, params(ref_uri))
    first = spark.createDataFrame(spark.read.parquet(out).collect(), spark.read.parquet(out).schema)
    first_transform = (tmp_path / "preprocess" / "dt=2013-01-01" / "_transform.json").read_text()

    second_report = preprocess.run(spark, [src], out, params(ref_uri))

    assertDataFrameEqual(spark.read.parquet(out), first)
    assert spark.read.parquet(out).count() == 4
    assert second_report == first_report
    assert (tmp_path / "preprocess" / "dt=2013-01-01" / "_transform.json").read_text() == first_transform
    assert not list((tmp_path / "preprocess" / "_staging").iterdir())


def test_unparseable_reference_key_is_no_match_not_a_failed_day(spark):
    main = spark.createDataFrame([(1, "a"), (2, "b")], "k int, v string")
    ref = spark.createDataFrame([("1", "x"), ("NA", "y")], "k string, w string")
    spec = {"name": "r", "join_keys": ["k"], "columns": [{"name": "w", "expr": "w"}]}
    joined = preprocess.join_references(main, [(spec, ref)])
    got = {r["k"]: (r["w"], r["_matched__r"]) for r in joined.collect()}
    assert got == {1: ("x", True), 2: (None, None)}
