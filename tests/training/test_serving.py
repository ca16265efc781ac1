"""Serving without Spark: the raw contract's rejections, derived columns, reference joins.

Where serving mirrors a Spark behaviour (the CSV reader's malformed rows, derived
expressions in a session time zone) the test runs Spark on the same input and compares.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_contracts import encode as enc
from lakeprep_contracts import records
from lakeprep_train import serving
from lakeprep_train import transform as tf
from tests.training.transform_doc import PREPROCESS, VALIDATE, make_doc

HEADER = "year,month,day,carrier,flight,distance,arr_delay,tailnum,time_hour,note"
PLANES = (
    "tailnum,seats,manufacturer,model\n"
    "N1,149,BOEING,737-824\nN1,150,DUPLICATE,x\nN2,55,EMBRAER,ERJ 145\nN3,NA,,\n"
)


def write(tmp_path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def serve_csv(tmp_path, rows: list[str], doc=None, **kwargs):
    source = write(tmp_path, "in.csv", "\n".join([HEADER, *rows]) + "\n")
    planes = write(tmp_path, "planes.csv", PLANES)
    return serving.serve(source, doc or make_doc(), references={"planes": planes}, **kwargs)


def test_contract_rejections_carry_validates_reasons_in_order(tmp_path):
    rows = [
        "2013,1,5,UA,1545,1400,20,N1,2013-01-06 03:00:00,Late storm!",  # accepted
        "2013,1,5, B6 ,15,NA,-3,N2,2013-01-06T10:00:00Z,",  # accepted: NA is null
        "2013,1,x,UA,1,1,1,N1,2013-01-01,",  # bad int
        "2013,1,5,AA,1,1,,N1,2013-01-01,",  # accepted: arr_delay null -> no label
        "2013,1,5,AA,1,inf,3,N1,2013-01-01,",  # non-finite double
        "2013,1,5,AA,1,1",  # too few fields
        "2013,1,5,,1,1,1,N1,2013-01-01,",  # null in a non-nullable string
        "2013,1,5,  ,1,1,1,N1,2013-01-01,",  # blank after trim is null too
        "2013,1,5,AA,1,1,1,N1,2013-99-01,",  # bad timestamp
        "2013,1,5,AA,1,NaN,1,N1,2013-01-01,",  # NaN is non-finite
        "2013,1,5,AA,x,1,1,N1,2013-01-01 " + "9" * 80 + ",",  # first failing column wins
        '2013,1,5,AA,1,1,1,N1,2013-01-01,"unterminated',  # a quote left open runs to the end:
        "2013,1,5,AA,1,1,1,N1,2013-01-01,swallowed",  # one malformed record (multiLine)
    ]
    served = serve_csv(tmp_path, rows)
    assert served.rows_read == 12 and served.accepted.tolist() == [0, 1, 3]
    assert [(r["row"], r["line"], r["reason"]) for r in served.rejected] == [
        (2, 4, "bad int in day: x"),
        (4, 6, "non-finite double in distance: inf"),
        (5, 7, "malformed record"),
        (6, 8, "null in carrier"),
        (7, 9, "null in carrier"),
        (8, 10, "bad timestamp in time_hour: 2013-99-01"),
        (9, 11, "non-finite double in distance: NaN"),
        (10, 12, "bad int in flight: x"),
        (11, 13, "malformed record"),
    ]
    # As in validate, a row that did not type has no derived columns (so no id); one
    # that typed has them, with or without its label.
    assert [r["id"] for r in served.rejected] == [None] * 9
    assert served.features["id"].tolist() == ["2013-01-05-UA-1545", "2013-01-05- B6 -15", "2013-01-05-AA-1"]
    assert served.labels.tolist()[:2] == [1.0, 0.0] and np.isnan(served.labels[2])
    assert served.unused_labels == []
    assert served.reason_counts == {
        "bad int in day": 1,
        "bad int in flight": 1,
        "bad timestamp in time_hour": 1,
        "malformed record": 2,
        "non-finite double in distance": 2,
        "null in carrier": 2,
    }
    assert served.rows_read == len(served.accepted) + len(served.rejected)


def test_bad_values_are_quoted_to_64_characters_and_labels_checked(tmp_path):
    long_value = "ü" * 70
    rows = [
        f"2013,1,5,AA,1,{long_value},1,N1,2013-01-01,",
        "2013,1,5,AA,1,1,1,N1,2013-01-01,",
    ]
    served = serve_csv(tmp_path, rows)
    assert served.rejected[0]["reason"] == f"bad double in distance: {'ü' * 64}"
    validate = {**VALIDATE, "label_classes": [1, 2]}
    served = serve_csv(tmp_path, ["2013,1,5,AA,1,1,1,N1,2013-01-01,"], doc=make_doc(validate=validate))
    # Scored all the same; the label that is not a class is left out and said why.
    assert served.rejected == [] and served.accepted.tolist() == [0]
    assert np.isnan(served.labels).tolist() == [True]
    assert served.unused_labels == [
        {"row": 0, "line": 2, "id": "2013-01-05-AA-1", "reason": "label delayed not in [1, 2]: 0"}
    ]
    assert served.unused_label_counts == {"label delayed not in [1, 2]": 1}


def test_records_with_a_blank_label_are_scored_from_csv_and_json_lines(tmp_path):
    """The records serving exists for: the label's source present but blank, null or a null token."""
    planes = {"planes": write(tmp_path, "p.csv", PLANES)}
    values = {"carrier": "UA", "distance": "1400", "tailnum": "N1", "time_hour": "2013-01-06 03:00:00"}
    delays = ["", "   ", "NA", None, "20"]  # None: the key absent (JSON) / the value unquoted empty (CSV)
    csv_rows = [
        f"2013,1,5,UA,{i},1400,{'' if d is None else d},N1,2013-01-06 03:00:00,storm"
        for i, d in enumerate(delays)
    ]
    csv = write(tmp_path, "in.csv", "\n".join([HEADER, *csv_rows, "2013,1,5,UA,x,1,1,N1,,"]) + "\n")
    json_rows = []
    for i, d in enumerate(delays):
        record = {"year": 2013, "month": 1, "day": 5, "flight": i, **values, "note": "storm"}
        if d is not None:
            record["arr_delay"] = d
        json_rows.append(json.dumps(record))
    json_rows[2] = json_rows[2].replace('"NA"', "null")  # a JSON null too
    jsonl = write(tmp_path, "in.jsonl", "\n".join([*json_rows, "{not json"]) + "\n")
    for source in (csv, jsonl):
        served = serving.serve(source, make_doc(), references=planes)
        assert served.rows_read == 6 and served.accepted.tolist() == [0, 1, 2, 3, 4], source
        assert [r["row"] for r in served.rejected] == [5]
        assert served.rows_read == len(served.accepted) + len(served.rejected)
        assert served.labelled and served.unused_labels == []
        assert np.isnan(served.labels[:4]).all() and served.labels[4] == 1.0
        assert served.features["id"].tolist() == [f"2013-01-05-UA-{i}" for i in range(5)]
        # Features do not depend on the label: the unlabelled rows encode as the labelled one.
        for name, encoded in served.features.items():
            if name != "id":
                assert all(np.array_equal(encoded[k], encoded[4]) for k in range(4)), (source, name)


def test_a_label_column_of_the_contract_never_rejects_a_row(tmp_path):
    """A raw label column, even declared non-nullable: blank is no label, a bad value is reported."""
    validate = {
        **VALIDATE,
        "columns": [*VALIDATE["columns"], {"name": "delayed", "type": "int", "nullable": False}],
        "derived": [d for d in VALIDATE["derived"] if d["name"] != "delayed"],
    }
    doc = make_doc(validate=validate)
    planes = {"planes": write(tmp_path, "p.csv", PLANES)}
    header = f"{HEADER},delayed"
    base = "2013,1,5,UA,{},1400,20,N1,2013-01-06 03:00:00,storm,{}"
    rows = [base.format(i, label) for i, label in enumerate(["1", "", "NA", "x", "2", "0", "inf"])]
    source = write(tmp_path, "in.csv", "\n".join([header, *rows, "2013,1,x,UA,7,1,1,N1,,,1"]) + "\n")
    served = serving.serve(source, doc, references=planes)
    assert served.accepted.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert [r["reason"] for r in served.rejected] == ["bad int in day: x"]
    assert np.nan_to_num(served.labels, nan=-1).tolist() == [1, -1, -1, -1, -1, 0, -1]
    assert [(u["row"], u["line"], u["id"], u["reason"]) for u in served.unused_labels] == [
        (3, 5, "2013-01-05-UA-3", "bad int in delayed: x"),
        (4, 6, "2013-01-05-UA-4", "label delayed not in [0, 1]: 2"),
        (6, 8, "2013-01-05-UA-6", "bad int in delayed: inf"),
    ]
    # Without the column at all, the input is unlabelled, not missing a required column.
    served = serving.serve(
        write(tmp_path, "nolabel.csv", f"{HEADER}\n{base[:-3]}\n".format(1)), doc, references=planes
    )
    assert served.accepted.tolist() == [0] and not served.labelled and served.labels is None


def test_invalid_utf8_is_named_before_the_type(tmp_path):
    source = write(tmp_path, "in.csv", (HEADER + "\n").encode() + b"2013,1,5,A\xff,1,1,1,N1,2013-01-01,x\n")
    served = serving.serve(source, make_doc(), references={"planes": write(tmp_path, "p.csv", PLANES)})
    assert [r["reason"] for r in served.rejected] == ["invalid UTF-8 in carrier"]


def test_a_missing_required_column_fails_the_input_naming_it(tmp_path):
    source = write(tmp_path, "in.csv", "year,month\n2013,1\n")
    with pytest.raises(
        serving.ServingError, match=r"required column\(s\) \['day', 'carrier', 'flight'\] missing"
    ):
        serving.serve(source, make_doc())


def test_without_its_source_columns_the_label_is_not_checked_nor_returned(tmp_path):
    header = "year,month,day,carrier,flight,distance,tailnum,time_hour,note"
    source = write(tmp_path, "in.csv", f"{header}\n2013,1,5,UA,1,1400,N1,2013-01-06 03:00:00,late\n")
    served = serving.serve(source, make_doc(), references={"planes": write(tmp_path, "p.csv", PLANES)})
    assert not served.labelled and "label" not in served.features
    assert served.missing_columns == ["arr_delay"]
    assert served.features["id"].tolist() == ["2013-01-05-UA-1"]


@pytest.mark.parametrize(
    "options",
    [
        {"header": "true"},  # validate's defaults: multiLine, escape '"' (RFC 4180)
        {"header": "true", "multiLine": "false", "escape": "\\"},  # Spark's own defaults
    ],
    ids=["rfc4180", "spark-defaults"],
)
def test_csv_reading_matches_sparks_permissive_reader(spark, tmp_path, options):
    from pyspark.sql.types import StringType, StructField, StructType

    text = (
        '\ufeffa,b,c\n1,2,3\n1,2\n1,2,3,4\n\n"x,y",2,3\n1,"",3\n  1 , 2,3\n'
        '1,"say ""hi""",3\n1,"esc \\"q\\" x",3\n1,C:\\dir,3\n1,"two\nlines",3\n4,5,6\r\n7,8,9\n'
        '1,"unterminated,3\n4,5,6\n'
    )
    path = write(tmp_path, "raw.csv", text)
    schema = StructType([StructField(c, StringType()) for c in ["a", "b", "c", "_corrupt_record"]])
    spark_options = records.csv_options(options)
    rows = (
        spark.read.options(**spark_options)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .schema(schema)
        .csv(path)
        .collect()
    )
    contract = serving.Contract.from_params(
        {**VALIDATE, "options": options, "columns": [{"name": c, "type": "string"} for c in "abc"]}
    )
    ours = serving.read_records(path, contract)
    assert ours.malformed.tolist() == [r["_corrupt_record"] is not None for r in rows]
    good = ~ours.malformed
    for c in "abc":
        assert np.asarray(ours.columns[c].to_pylist(), dtype=object)[good].tolist() == [
            r[c] for r in rows if r["_corrupt_record"] is None
        ]


def test_json_lines_are_read_as_spark_reads_them(tmp_path):
    text = (
        '{"a": "1", "b": 2, "c": 1.50}\n{"a": 1e5, "b": true, "c": null}\nnot json\n\n'
        '[1, 2]\n{"a": NaN, "b": "\\u00e9"}\n{"b": {"n": 1}}\n[{"a": "r1"}, {"a": "r2"}]\n'
    )
    contract = serving.Contract.from_params(
        {**VALIDATE, "columns": [{"name": c, "type": "string"} for c in "abc"]}
    )
    records = serving.read_records(write(tmp_path, "raw.jsonl", text), contract)
    assert records.malformed.tolist() == [False, False, True, True, False, False, False, False]
    assert records.line.tolist() == [1, 2, 3, 5, 6, 7, 8, 8]
    assert records.columns["a"].to_pylist() == ["1", "1e5", None, None, "NaN", None, "r1", "r2"]
    assert records.columns["b"].to_pylist() == ["2", "true", None, None, "é", '{"n": 1}', None, None]
    assert records.columns["c"].to_pylist() == ["1.50", None, None, None, None, None, None, None]


def test_parquet_and_tables_are_read_through_sparks_string_cast(tmp_path):
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "year": pa.array([2013, 2013], pa.int32()),
            "month": [1, 1],
            "day": [5, 5],
            "carrier": ["UA", "EV"],
            "flight": [1, 2],
            "distance": [1400.0, 2.5],
            "arr_delay": [20.0, 1.5],
            "tailnum": ["N1", "N9"],
            "time_hour": pa.array([1357441200000000, None], pa.timestamp("us", tz="UTC")),
            "note": ["late", None],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    for source in (str(tmp_path / "in.parquet"), table):
        served = serving.serve(source, make_doc(), references={"planes": write(tmp_path, "p.csv", PLANES)})
        assert served.rejected == []
        assert served.features["id"].tolist() == ["2013-01-05-UA-1", "2013-01-05-EV-2"]
        assert served.labels.tolist() == [1.0, 0.0]


DERIVED = [
    ("weekday_ny", "dayofweek(time_hour)"),
    ("hour_ny", "hour(time_hour)"),
    ("date_ny", "CAST(to_date(time_hour) AS STRING)"),
    ("flight_id", "concat_ws('-', year, lpad(month, 2, '0'), lpad(day, 2, '0'), carrier, flight)"),
    ("delayed", "CAST(arr_delay > 15 AS INT)"),
    (
        "delay_band",
        "CASE WHEN arr_delay IS NULL THEN 'unknown' WHEN arr_delay > 60 THEN 'long' ELSE 'short' END",
    ),
    ("delay_int", "CAST(arr_delay AS INT)"),
    ("ratio", "distance / 3"),
    ("monday_zero", "weekday(time_hour)"),
    ("carrier_len", "length(carrier)"),
    ("as_double", "try_cast(note AS DOUBLE)"),
    ("after", "delay_int + 1"),
]


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_derived_columns_equal_spark_in_the_contract_time_zone(spark, zone):
    from pyspark.sql import functions as F

    table = pa.table(
        {
            "year": pa.array([2013, 2013, 2013, None], pa.int32()),
            "month": pa.array([1, 12, 3, 1], pa.int32()),
            "day": pa.array([5, 31, 10, 1], pa.int32()),
            "carrier": ["UA", "B6", None, "EV"],
            "flight": pa.array([1545, 7, 1, 2], pa.int32()),
            "arr_delay": [20.0, -2.7, 61.9, None],
            "distance": [1400.0, 1.0, None, 3.0],
            # 2013-01-06 03:00 UTC is Saturday evening in New York; 2014-01-01 04:30 UTC
            # still 2013-12-31 there; 2013-03-10 07:30 UTC just after the DST change.
            "time_hour": pa.array(
                [1357441200000000, 1388550600000000, 1362900600000000, None], pa.timestamp("us", tz="UTC")
            ),
            "note": ["1.5", " 2 ", "1d", "x"],
        }
    )
    ours = serving.add_derived(table, [{"name": n, "expr": e} for n, e in DERIVED], zone)
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        ddl = (
            "year int, month int, day int, carrier string, flight int, arr_delay double, "
            "distance double, time_hour timestamp, note string"
        )
        df = spark.createDataFrame([tuple(r.values()) for r in table.to_pylist()], ddl)
        for name, expr in DERIVED:
            df = df.withColumn(name, F.expr(expr))
        theirs = df.select(*[n for n, _ in DERIVED]).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    for name, _ in DERIVED:
        got = ours.column(name).to_pylist()
        expected = [r[name] for r in theirs]
        expected = [None if isinstance(v, float) and math.isnan(v) else v for v in expected]
        assert got == expected, name
    weekday = ours.column("weekday_ny").to_pylist()
    assert weekday[0] == (7 if zone == "America/New_York" else 1)  # Saturday there, Sunday in UTC


def test_the_translation_fixes_what_sqlglot_carries_over_wrongly():
    sql = serving.spark_sql_to_duckdb(
        "dayofweek(t) + CAST(x AS INT) + length(lpad(n, 3, '0'))",
        {"t": "TIMESTAMP", "x": "DOUBLE", "n": "INT"},
    )
    assert "DAYOFWEEK" in sql and "+ 1" in sql and "TRUNC" in sql and 'CAST("__t"."n" AS TEXT)' in sql
    with pytest.raises(serving.ServingError, match="nope"):
        serving.spark_sql_to_duckdb("nope + 1", {"x": "INT"})


def test_reference_joins_deduplicate_and_keep_every_row(tmp_path):
    table = pa.table({"tailnum": ["N1", "N2", "N3", "N404", None], "k": [1, 2, 3, 4, 5]})
    ref = PREPROCESS["references"][0]
    joined = serving.join_references(table, [ref], {"planes": write(tmp_path, "p.csv", PLANES)})
    assert joined.column("k").to_pylist() == [1, 2, 3, 4, 5]
    # N1 is listed twice: the row smallest by (seats, plane_model) is kept, as preprocess keeps it.
    assert joined.column("seats").to_pylist() == [149.0, 55.0, None, None, None]
    assert joined.column("plane_model").to_pylist() == ["BOEING 737-824", "EMBRAER ERJ 145", "", None, None]


def test_a_repeated_reference_key_keeps_the_row_preprocess_keeps(spark, tmp_path):
    """The same reference row per key in serving (DuckDB) as in preprocess (Spark), whatever
    the file order: ties on the first column, nulls and a key listed three times."""
    from lakeprep_jobs import preprocess

    ref = PREPROCESS["references"][0]
    lines = [
        "N1,149,BOEING,737-824",
        "N1,149,AIRBUS,A320",
        "N1,,ZZZ,nulls first",
        "N2,55,EMBRAER,ERJ 145",
        "N2,7,,",
        "N3,1,B,b",
        "N3,1,A,b",
    ]
    table = pa.table({"tailnum": ["N1", "N2", "N3", "N9"], "k": [1, 2, 3, 4]})
    for order in (lines, lines[::-1]):
        csv = write(tmp_path, "planes.csv", "tailnum,seats,manufacturer,model\n" + "\n".join(order) + "\n")
        ours = serving.join_references(table, [ref], {"planes": csv}).to_pylist()
        df = spark.createDataFrame(table.to_pylist(), "tailnum string, k long")
        reference = preprocess.read_reference(spark, {**ref, "uri": f"file://{csv}"})
        theirs = preprocess.join_references(df, [(ref, reference)]).orderBy("k").collect()
        assert [(r["seats"], r["plane_model"]) for r in ours] == [
            (r["seats"], r["plane_model"]) for r in theirs
        ]
        assert [r["plane_model"] for r in ours] == ["ZZZ nulls first", "", "A b", None]


def test_padded_string_join_keys_match_as_in_preprocess(spark):
    """Tab, LF, CR and mixed padding on either side: the same matches as preprocess's Spark
    join, the input's values kept; a blank key matches nothing."""
    from lakeprep_jobs import preprocess

    ref = PREPROCESS["references"][0]
    keys = ["\tN1\t", "N2\n", "\r\nN3 \t", " \t\r\n", "N1", "N4"]
    table = pa.table({"tailnum": keys, "k": list(range(len(keys)))})
    planes = {
        "tailnum": [" N1", "N2\t", "N3\r", "", "N4\u00a0"],
        "seats": ["149", "55", "7", "1", "9"],
        "manufacturer": ["B", "E", "C", "Z", "N"],
        "model": ["1", "2", "3", "4", "5"],
    }
    ours = serving.join_references(table, [ref], {"planes": pa.table(planes)})
    assert ours.column("tailnum").to_pylist() == keys
    assert ours.column("seats").to_pylist() == [149.0, 55.0, 7.0, None, 149.0, None]
    rows = [dict(zip(planes, values, strict=True)) for values in zip(*planes.values(), strict=True)]
    df = spark.createDataFrame(table.to_pylist(), "tailnum string, k long")
    theirs = preprocess.join_references(df, [(ref, spark.createDataFrame(rows))]).orderBy("k").collect()
    assert [r["seats"] for r in theirs] == ours.column("seats").to_pylist()


def land_planes_snapshots(tmp_path, seats: dict[str, int], complete: bool = True) -> str:
    """A planes table of dated snapshots (`dt=<day>/`): N1's seats per day."""
    folder = tmp_path / "planes"
    for day, n in seats.items():
        snapshot = folder / f"dt={day}"
        snapshot.mkdir(parents=True)
        (snapshot / "planes.csv").write_text(f"tailnum,seats,manufacturer,model\nN1,{n},B,x\n")
        if complete:
            (snapshot / "_SUCCESS").write_text("")
    return str(folder)


def test_serving_joins_the_newest_complete_snapshot_or_the_days(tmp_path):
    folder = land_planes_snapshots(tmp_path, {"2013-01-10": 100, "2013-01-20": 200})
    land_planes_snapshots(tmp_path, {"2013-01-30": 300}, complete=False)  # still landing
    table = pa.table({"tailnum": ["N1"]})
    ref = PREPROCESS["references"][0]

    def seats(day=None):
        path, snapshot = serving.reference_snapshot(folder, "planes", day)
        joined = serving.join_references(table, [ref], {"planes": path})
        return snapshot, joined.column("seats").to_pylist()[0]

    assert seats() == ("2013-01-20", 200.0)  # the newest complete one
    assert seats("2013-01-10") == ("2013-01-10", 100.0)
    assert seats("2013-01-15") == ("2013-01-10", 100.0)
    with pytest.raises(
        serving.ServingError, match=r"reference 'planes' .* no snapshot dated on or before 2013-01-09"
    ):
        seats("2013-01-09")
    with pytest.raises(
        serving.ServingError, match=r"dt=2013-01-30 .* the newest on or before 2013-02-01, is not complete"
    ):
        seats("2013-02-01")
    # A plain folder or file is no history.
    plain = write(tmp_path, "planes.csv", PLANES)
    assert serving.reference_snapshot(plain, "planes") == (plain, None)

    source = write(tmp_path, "in.csv", f"{HEADER}\n2013,1,5,UA,1545,1400,20,N1,2013-01-06 03:00:00,x\n")
    served = serving.serve(source, make_doc(), references={"planes": folder}, reference_date="2013-01-15")
    assert served.reference_snapshots == {
        "planes": {"uri": f"{folder}/dt=2013-01-10", "snapshot": "2013-01-10"}
    }


def test_carried_reference_columns_are_used_as_they_are(tmp_path):
    table = pa.table({"tailnum": ["N1"], "seats": ["12"], "plane_model": ["GIVEN"]})
    joined = serving.join_references(table, PREPROCESS["references"], {})
    assert joined.column("seats").to_pylist() == ["12"] and joined.column("plane_model").to_pylist() == [
        "GIVEN"
    ]
    assert tf.clean_numeric(joined.column("seats")).tolist() == [12.0]
    with pytest.raises(serving.ServingError, match=r"reference 'planes'.*--reference planes=PATH"):
        serving.join_references(pa.table({"tailnum": ["N1"]}), PREPROCESS["references"], {})


def test_features_of_served_rows(tmp_path):
    served = serve_csv(
        tmp_path,
        [
            "2013,1,5,UA,1545,1400,20,N1,2013-01-05 23:00:00,Late storm!",  # Saturday in New York
            "2013,1,5, B6 ,15,NA,-3,N2,2013-01-06T10:00:00Z,",  # 05:00 on Sunday there
            "2013,1,6,ZZ,1,50,-3,N404,,storm",
        ],
    )
    f = served.features
    assert f["id"].tolist() == ["2013-01-05-UA-1545", "2013-01-05- B6 -15", "2013-01-06-ZZ-1"]
    np.testing.assert_allclose(f["num__distance"], [1.25, 0.25, -2.0])
    np.testing.assert_allclose(f["num__seats"], [139 / 300, 45 / 300, 140 / 300], rtol=1e-6)
    assert f["cat__carrier"].tolist() == [2, 3, 1]
    # Saturday (7) and Sunday (1) in the contract's time zone; no time, no day.
    spec = make_doc()["categorical"][1]
    assert f["cat__day_of_week"].tolist() == enc.encode_categorical(pa.array(["7", "1", None]), spec).tolist()
    assert f["txt__note"].tolist() == [[2, 3, 0], [0, 0, 0], [3, 0, 0]]
    assert (f["txt__plane_model"][2] == 0).all() and (f["txt__plane_model"][0][:3] > 0).all()


def test_a_reference_folder_reads_its_data_files_as_spark_does(tmp_path):
    ref = {"name": "w", "format": "csv", "options": {"header": "true"}, "join_keys": ["k"], "columns": []}
    folder = tmp_path / "weather"
    folder.mkdir()
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-0.csv.crc").write_text("junk")
    (folder / "part-0.csv").write_text("k,t\n1,10\n")
    (folder / "part-1.csv").write_text("k,t\n2,20\n")
    table = serving.read_reference(str(folder), ref)
    assert table.column("k").to_pylist() == ["1", "2"] and table.column("t").to_pylist() == ["10", "20"]
    assert serving.read_reference(f"file://{folder}", ref).num_rows == 2
    (folder / "part-0.csv").unlink()
    (folder / "part-1.csv").unlink()
    with pytest.raises(serving.ServingError, match="reference folder holds no data files"):
        serving.read_reference(str(folder), ref)


def test_named_classes_are_served_as_their_ids_by_the_labels_text(tmp_path):
    """Named classes (lakeprep_contracts.labels): the label's text as Spark casts it, exactly;
    the id is the class's position in label.classes, as preprocess writes it."""
    rows = [
        "2013,1,5,AA,1,1,20,N1,2013-01-01,",  # delayed 1: the text "1", the first class
        "2013,1,5,AA,2,1,1,N1,2013-01-01,",  # delayed 0: "0" is not a class
        "2013,1,5,AA,3,1,,N1,2013-01-01,",  # no label
    ]
    validate = {**VALIDATE, "label_classes": ["1", "late"]}
    served = serve_csv(tmp_path, rows, doc=make_doc(validate=validate))
    assert served.rejected == [] and served.accepted.tolist() == [0, 1, 2]
    assert served.labels[0] == 0.0 and np.isnan(served.labels[1:]).all()
    assert [u["reason"] for u in served.unused_labels] == ["label delayed not in ['1', 'late']: 0"]
    validate = {**VALIDATE, "label_classes": ["late", "0", "1"]}
    served = serve_csv(tmp_path, rows, doc=make_doc(validate=validate))
    assert served.labels[:2].tolist() == [2.0, 1.0] and served.unused_labels == []
