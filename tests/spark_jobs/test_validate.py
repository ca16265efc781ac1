from __future__ import annotations

import json

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_jobs import common, validate
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
    saved = json.loads((tmp_path / "validate" / "dt=2013-01-01" / common.REPORT_NAME).read_text())
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
    report = validate.run(spark, [f"file://{part}"], f"file://{tmp_path}/out", params(allow_empty=True))
    assert report["rows_in"] == 0


def test_quarantine_share_above_threshold_fails_after_commit(spark, tmp_path):
    src = land(tmp_path, CSV)
    out = tmp_path / "out"
    with pytest.raises(ContractError, match=r"3 of 6 rows \(50.0%\) quarantined"):
        validate.run(spark, [src], f"file://{out}", params(max_quarantine_share=0.2))
    # Committed so it can be inspected; the failed task keeps downstream from running.
    assert (out / "_quarantine").is_dir()


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
        common.params_from(ValidateParams, {"format": "csv", "colums": []})


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

    assert common.REPORT_NAME == REPORT_NAME
