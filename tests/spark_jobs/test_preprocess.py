"""preprocess: a daily, stateless stage (dedupe, joins, cleaning, tokens); nothing fitted."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import pytest
from pyspark.testing import assertDataFrameEqual

from lakeprep_contracts.text import TOKENIZER
from lakeprep_jobs import failure, lake_io, preprocess
from lakeprep_jobs.preprocess import PreprocessParams

MAIN_SCHEMA = "flight_id string, delayed int, hour int, distance double, carrier string, model string"
# Row "c" has no weather at hour 7; row "e" repeats "a" exactly, row "f" reuses id "b".
MAIN_ROWS = [
    ("a", 0, 5, 100.0, " AA ", "Boeing 737-800"),
    ("b", 1, 6, 200.0, "UA", "AIRBUS a320"),
    ("c", 0, 7, float("nan"), "", None),
    ("d", 1, 5, 500.0, None, "ÜBER-jet, 2nd"),
    ("a", 0, 5, 100.0, " AA ", "Boeing 737-800"),
    ("b", 0, 9, 999.0, "XX", "other"),
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
        tokenizer=TOKENIZER,
        deduplicate=True,
        text_max_length=1000,
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
    # The repeated key keeps the row whose values sort first, whatever the table's order.
    assert names["x"] == names["y"] == "eins"
    reordered = spark.createDataFrame(table.collect()[::-1], table.schema).repartition(3)
    again = preprocess.join_references(main, [(ref, reordered)]).collect()
    assert {r["v"]: r["label_name"] for r in again} == names


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


# --------------------------------------------------------------------------- run()


def test_run_end_to_end(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    out_dir = tmp_path / "preprocess" / "dt=2013-01-01"
    report = preprocess.run(spark, [src], f"file://{out_dir}", params(ref_uri))

    assert report["rows_in"] == 6 and report["rows_out"] == 4 and report["rows_quarantined"] == 2
    assert report["quarantine_reasons"] == {"conflicting duplicate id": 1, "exact duplicate": 1}
    assert report["reference_unmatched"] == {"weather": 1}
    assert json.loads((out_dir / lake_io.REPORT_NAME).read_text()) == report
    assert (out_dir / "_SUCCESS").exists()
    quarantine = spark.read.parquet(f"file://{out_dir}/_quarantine").collect()
    assert sorted(r["_reason"] for r in quarantine) == ["conflicting duplicate id", "exact duplicate"]

    out = spark.read.parquet(f"file://{out_dir}")
    assert out.columns == ["id", "label", "distance", "temp", "carrier", "model"]
    assert dict(out.dtypes) == {
        "id": "string",
        "label": "int",
        "distance": "double",
        "temp": "double",
        "carrier": "string",
        "model": "array<string>",
    }
    rows = {r["id"]: r for r in out.collect()}
    assert sorted(rows) == ["a", "b", "c", "d"]
    # Nothing fitted: raw values, cleaned. NaN is missing; whitespace trimmed; "" missing.
    assert rows["a"]["distance"] == 100.0 and rows["c"]["distance"] is None
    assert rows["a"]["carrier"] == "AA" and rows["c"]["carrier"] is None and rows["d"]["carrier"] is None
    assert rows["a"]["temp"] == 10.0 and rows["c"]["temp"] is None
    assert rows["a"]["model"] == ["boeing", "737", "800"]
    assert rows["d"]["model"] == ["über", "jet", "2nd"]
    assert rows["c"]["model"] == []
    # Which "b" is kept does not depend on file order (smallest row hash).
    assert rows["b"]["carrier"] in ("UA", "XX")


def test_reference_features_are_profiled_for_drift(spark, tmp_path):
    from lakeprep_contracts import documents

    src, ref_uri = land(spark, tmp_path)
    out_dir = tmp_path / "out"
    preprocess.run(spark, [src], f"file://{out_dir}", params(ref_uri, stats_kinds={"temp": "numeric"}))
    doc = json.loads((out_dir / "_stats.json").read_text())
    documents.require("stats", doc, "preprocess _stats.json")
    assert list(doc["columns"]) == ["temp"]
    # 4 kept rows: temp 10 (a, d), 20 (b), none for c (hour 7 has no weather).
    assert doc["columns"]["temp"]["count"] == 3 and doc["columns"]["temp"]["nulls"] == 1
    assert doc["columns"]["temp"]["max"] == 20.0


@contextlib.contextmanager
def scans_of(spark, file_format: str, location: str) -> Iterator[Callable[[], int]]:
    """Within the block, the SQL executions are recorded with their scans' locations in
    full; the callable gives the rows that `file_format` scans of `location` returned in
    them (Spark's SQL status store, as the UI's SQL tab reads it)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    store = spark._jsparkSession.sharedState().statusStore()
    listed = store.executionsList()
    after = max([listed.apply(i).executionId() for i in range(listed.size())], default=-1)
    # A scan's location is cut to 100 characters in its plan's description by default.
    setting, before = "spark.sql.maxMetadataStringLength", spark.conf.get("spark.sql.maxMetadataStringLength")
    spark.conf.set(setting, "100000")

    def rows() -> int:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        executions = store.executionsList()
        total = 0
        for i in range(executions.size()):
            execution_id = executions.apply(i).executionId()
            if execution_id <= after:
                continue
            values = store.executionMetrics(execution_id)
            nodes = store.planGraph(execution_id).allNodes()
            # A query over a cached table shows the cached plan's scan again, with the same
            # metric (0 when the cache answered): a metric counts once per execution.
            counted: dict[int, int] = {}
            for j in range(nodes.size()):
                node = nodes.apply(j)
                if node.name().strip() != f"Scan {file_format}" or location not in node.desc():
                    continue
                metrics = node.metrics()
                for k in range(metrics.size()):
                    metric = metrics.apply(k)
                    value = values.get(metric.accumulatorId())
                    if metric.name() == "number of output rows" and value.isDefined():
                        counted[metric.accumulatorId()] = int(value.get().replace(",", ""))
            total += sum(counted.values())
        return total

    try:
        yield rows
    finally:
        spark.conf.set(setting, before)


def test_each_reference_table_is_read_once_for_the_join_and_the_profile(spark, tmp_path):
    """The profile's weights join the same de-duplicated reference rows as the partition."""
    src, ref_uri = land(spark, tmp_path)
    with scans_of(spark, "csv", str(tmp_path / "reference" / "weather")) as weather_rows:
        report = preprocess.run(
            spark, [src], f"file://{tmp_path}/out", params(ref_uri, stats_kinds={"temp": "numeric"})
        )
    assert report["rows_out"] == 4 and (tmp_path / "out" / "_stats.json").exists()
    assert weather_rows() == 3  # WEATHER_CSV's rows, once


def test_the_profile_of_reference_columns_is_the_profile_of_the_joined_rows(spark, tmp_path):
    """Taken from each reference's rows weighted by the day's rows that joined them: the same
    document as profiling every joined row, with repeated, unmatched and null keys, a
    quarantined duplicate, NaN, text and a reference keyed on an earlier one's column."""
    from pyspark.sql import functions as F

    from lakeprep_jobs import stats

    src, weather_uri = land(spark, tmp_path)
    ref_dir = tmp_path / "reference"
    (ref_dir / "models").mkdir()
    (ref_dir / "models" / "m.csv").write_text(
        "model,maker,note\n"
        "Boeing 737-800,Boeing,Narrow body; twin jet\n"
        "Boeing 737-800,Boeing,a second row for the same key\n"
        "AIRBUS a320,Airbus,NaN\n"
        "other,,\n"
    )
    (ref_dir / "climate").mkdir()
    (ref_dir / "climate" / "c.csv").write_text("temp,feel\n10.0,cold\n20.0,mild\n")
    models = {
        "name": "models",
        "uri": f"file://{ref_dir}/models",
        "format": "csv",
        "options": {"header": "true"},
        "join_keys": ["model"],
        "columns": [
            {"name": "maker", "expr": "maker"},
            {"name": "note", "expr": "note"},
            {"name": "note_nan", "expr": "TRY_CAST(note AS DOUBLE)"},
        ],
    }
    climate = {
        "name": "climate",
        "uri": f"file://{ref_dir}/climate",
        "format": "csv",
        "options": {"header": "true"},
        "join_keys": ["temp"],  # a column the weather reference adds
        "columns": [{"name": "feel", "expr": "feel"}],
    }
    kinds = {"temp": "numeric", "maker": "categorical", "note": "text", "note_nan": "numeric", "feel": "text"}
    refs = [weather_ref(weather_uri), models, climate]
    out_dir = tmp_path / "out"
    report = preprocess.run(
        spark, [src], f"file://{out_dir}", params(weather_uri, references=refs, stats_kinds=kinds)
    )
    assert (report["rows_out"], report["rows_quarantined"]) == (4, 2)

    # The kept rows (one "a", the kept "b") joined row by row, as before the weighting.
    rows, out = spark.read.parquet(src).dropDuplicates(), spark.read.parquet(f"file://{out_dir}")
    same_distance = F.nanvl(rows["distance"], F.lit(None)).eqNullSafe(out["distance"])  # NaN is null there
    kept = rows.join(out, (rows["flight_id"] == out["id"]) & same_distance).select(rows["*"])
    tables = [(r, preprocess.read_reference(spark, r)) for r in refs]
    want = stats.partition_stats(preprocess.join_references(kept, tables).select(*kinds), kinds)
    got = json.loads((out_dir / "_stats.json").read_text())
    assert got["rows"] == want["rows"] == 4
    for name in kinds:
        mine, theirs = dict(got["columns"][name]), dict(want["columns"][name])
        for key in ("mean", "stddev"):
            if theirs.get(key) is not None:
                assert mine.pop(key) == pytest.approx(theirs.pop(key), rel=1e-12), (name, key)
        assert mine == theirs, name
    assert got["columns"]["temp"]["count"] == 3 and got["columns"]["note_nan"]["nan"] == 1


def test_preprocess_profiles_reference_columns_only(spark):
    with pytest.raises(
        ValueError, match=r"stats_kinds \['distance'\]: preprocess profiles reference columns"
    ):
        params("file:///nowhere", stats_kinds={"distance": "numeric"})


def test_the_kept_duplicate_does_not_depend_on_row_order(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path / "one")
    first = preprocess.run(spark, [src], f"file://{tmp_path}/one/out", params(ref_uri))
    src2, ref2 = land(spark, tmp_path / "two", rows=list(reversed(MAIN_ROWS)))
    second = preprocess.run(spark, [src2], f"file://{tmp_path}/two/out", params(ref2))
    a = spark.read.parquet(f"file://{tmp_path}/one/out")
    b = spark.read.parquet(f"file://{tmp_path}/two/out")
    assertDataFrameEqual(a, b)
    assert first["quarantine_reasons"] == second["quarantine_reasons"]


def test_deduplicate_off_keeps_every_row(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    report = preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri, deduplicate=False))
    assert report["rows_out"] == 6 and report["rows_quarantined"] == 0


def test_long_text_is_cut_before_tokenizing_and_counted(spark, tmp_path):
    rows = [("a", 0, 5, 1.0, "AA", "word " * 1000)]
    src, ref_uri = land(spark, tmp_path, rows=rows)
    report = preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri, text_max_length=20))
    assert report["text_cut"] == {"model": 1}
    (row,) = spark.read.parquet(f"file://{tmp_path}/out").collect()
    assert row["model"] == ["word"] * 4


def test_a_text_a_tokenizer_file_encodes_stays_text_cut_at_the_limit(spark, tmp_path):
    rows = [("a", 0, 5, 1.0, "AA", "Boeing 737-800 " * 10)]
    src, ref_uri = land(spark, tmp_path, rows=rows)
    out = f"file://{tmp_path}/out"
    report = preprocess.run(spark, [src], out, params(ref_uri, text_max_length=20, subword_text=["model"]))
    assert report["text_cut"] == {"model": 1}
    (row,) = spark.read.parquet(out).collect()
    assert row["model"] == ("Boeing 737-800 " * 10)[:20]  # the tokenizer file splits it, not Spark


def test_run_twice_gives_the_same_partition(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    out = f"file://{tmp_path}/preprocess/dt=2013-01-01"
    first_report = preprocess.run(spark, [src], out, params(ref_uri))
    first = spark.createDataFrame(spark.read.parquet(out).collect(), spark.read.parquet(out).schema)

    second_report = preprocess.run(spark, [src], out, params(ref_uri))

    assertDataFrameEqual(spark.read.parquet(out), first)
    assert second_report == first_report
    assert not list((tmp_path / "preprocess" / "_staging").iterdir())


def test_unparseable_reference_key_is_no_match_not_a_failed_day(spark):
    main = spark.createDataFrame([(1, "a"), (2, "b")], "k int, v string")
    ref = spark.createDataFrame([("1", "x"), ("NA", "y")], "k string, w string")
    spec = {"name": "r", "join_keys": ["k"], "columns": [{"name": "w", "expr": "w"}]}
    joined = preprocess.join_references(main, [(spec, ref)])
    got = {r["k"]: (r["w"], r["_matched__r"]) for r in joined.collect()}
    assert got == {1: ("x", True), 2: (None, None)}


def test_an_uncommitted_input_is_refused(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path)
    (tmp_path / "validate" / "dt=2013-01-01" / "_SUCCESS").unlink()
    with pytest.raises(FileNotFoundError, match=r"dt=2013-01-01'\] are not complete \(no _SUCCESS\)"):
        preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri))
    assert not (tmp_path / "out").exists()


def test_ids_that_share_a_hash_are_told_apart_by_their_values(spark):
    # A repeated hash is a repeated id or, rarely, two ids with one hash: the second
    # grouping, by value, keeps only the first. As if every hash had collided:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([("a",), ("b",), ("a",), ("c",), (None,), (None,)], "id string")
    every_hash = df.select(F.xxhash64("id").alias("_id_hash")).distinct()
    assert sorted(r[0] or "" for r in preprocess.repeated_ids(df, "id", every_hash).collect()) == ["", "a"]
    assert sorted(r[0] or "" for r in preprocess.repeated_ids(df, "id").collect()) == ["", "a"]
    by_hash = preprocess.repeated_id_hashes(df, "id")
    assert sorted(r[0] or "" for r in preprocess.repeated_ids(df, "id", by_hash).collect()) == ["", "a"]
    assert by_hash.count() == 2


def test_a_small_day_runs_few_spark_jobs(spark, tmp_path):
    """Passes are not re-added: the reference's header, one aggregation of the ids' hashes,
    the partition, whose write also counts for the report (observed: 12 jobs when the
    counts were an aggregation of their own); the input's schema comes from its footer,
    not from a job. (Spark's adaptive execution runs each shuffle as jobs of its own: at 6
    rows these are most of the count.)"""
    from tests.spark_jobs.job_count import spark_jobs

    src, ref_uri = land(spark, tmp_path, rows=MAIN_ROWS[:4])  # no id repeats
    p = params(ref_uri)
    report, jobs = spark_jobs(spark, lambda: preprocess.run(spark, [src], f"file://{tmp_path}/out", p))
    assert (report["rows_out"], report["rows_quarantined"]) == (4, 0)
    assert len(jobs) <= 8, "\n".join(jobs)


def test_an_empty_day_is_counted_as_empty_while_written(spark, tmp_path):
    # The counts come from the write (an observation): a day without rows still gets them.
    src, ref_uri = land(spark, tmp_path, rows=[])
    out = tmp_path / "out"
    report = preprocess.run(spark, [src], f"file://{out}", params(ref_uri))
    assert (report["rows_in"], report["rows_out"], report["rows_quarantined"]) == (0, 0, 0)
    assert report["reference_unmatched"] == {"weather": 0}
    assert (out / "_SUCCESS").exists()
    assert spark.read.parquet(f"file://{out}").count() == 0


def test_a_day_with_duplicates_adds_the_kept_rows_and_the_quarantine(spark, tmp_path):
    """The ids that repeat (counted), the kept row per repeated id (one table, joined once:
    the flagged rows are cached for the report's counts and both writes), the quarantine."""
    from tests.spark_jobs.job_count import spark_jobs

    src, ref_uri = land(spark, tmp_path)
    p = params(ref_uri)
    report, jobs = spark_jobs(spark, lambda: preprocess.run(spark, [src], f"file://{tmp_path}/out", p))
    assert (report["rows_out"], report["rows_quarantined"]) == (4, 2)
    assert len(jobs) <= 20, "\n".join(jobs)


def test_copies_across_files_keep_exactly_one_row(spark, tmp_path):
    """Three identical rows (two files) and a conflicting one: one kept, by the smallest row
    hash, whatever the files; the identical ones tie-break on file and position."""
    part = f"file://{tmp_path}/validate/dt=2013-01-01"
    copy = ("x", 1, 5, 1.0, "AA", "m")
    other = ("x", 0, 6, 2.0, "UA", "n")
    spark.createDataFrame([copy, ("y", 0, 5, 3.0, "B6", "k")], MAIN_SCHEMA).coalesce(1).write.parquet(part)
    spark.createDataFrame([copy, copy, other], MAIN_SCHEMA).coalesce(1).write.mode("append").parquet(part)
    ref = tmp_path / "reference"
    ref.mkdir()
    (ref / "weather.csv").write_text(WEATHER_CSV)
    report = preprocess.run(spark, [part], f"file://{tmp_path}/out", params(f"file://{ref}"))
    rows = spark.read.parquet(f"file://{tmp_path}/out").collect()
    assert sorted(r["id"] for r in rows) == ["x", "y"]
    assert report["rows_in"] == 5 and report["rows_out"] == 2
    # Which of the two "x" rows wins depends only on the hash of its values.
    kept = next(r for r in rows if r["id"] == "x")
    if kept["label"] == copy[1]:
        assert report["quarantine_reasons"] == {"conflicting duplicate id": 1, "exact duplicate": 2}
    else:
        assert kept["carrier"] == "UA"
        assert report["quarantine_reasons"] == {"conflicting duplicate id": 3}


# ------------------------------------------------------------------- reference snapshots


def land_snapshots(tmp_path, temps: dict[str, str], complete: bool = True) -> str:
    """A weather table of dated snapshots (`dt=<day>/`), hour 5's temperature per day."""
    ref = tmp_path / "snapshots" / "weather"
    for day, temp in temps.items():
        snapshot = ref / f"dt={day}"
        snapshot.mkdir(parents=True)
        (snapshot / "weather.csv").write_text(f"hour,temp\n5,{temp}\n6,{temp}\n")
        if complete:
            (snapshot / "_SUCCESS").write_text("")
    return f"file://{ref}"


def test_a_backfill_joins_the_snapshot_of_its_day(spark, tmp_path):
    """Each day joins the newest snapshot on or before it: never a later day's facts."""
    src, _ = land(spark, tmp_path, rows=MAIN_ROWS[:4])
    ref_uri = land_snapshots(tmp_path, {"2013-01-10": "10", "2013-01-20": "20"})
    joined = {}
    for day in ("2013-01-10", "2013-01-15", "2013-01-25"):
        out = f"file://{tmp_path}/preprocess/dt={day}"
        report = preprocess.run(spark, [src], out, params(ref_uri, day=day))
        joined[day] = (
            {r["id"]: r["temp"] for r in spark.read.parquet(out).collect()},
            report["reference_snapshots"],
        )
    want = {"2013-01-10": 10.0, "2013-01-15": 10.0, "2013-01-25": 20.0}
    for day, temp in want.items():
        temps, snapshots = joined[day]
        assert temps == {"a": temp, "b": temp, "c": None, "d": temp}, day
        snapshot = "2013-01-20" if temp == 20.0 else "2013-01-10"
        assert snapshots == {"weather": {"uri": f"{ref_uri}/dt={snapshot}", "snapshot": snapshot}}


def test_a_day_before_the_first_snapshot_is_refused_naming_the_reference_and_the_day(spark, tmp_path):
    src, _ = land(spark, tmp_path)
    ref_uri = land_snapshots(tmp_path, {"2013-01-10": "10", "2013-01-20": "20"})
    out = tmp_path / "out"
    with pytest.raises(
        ValueError, match=r"reference 'weather' .* no snapshot dated on or before 2013-01-09"
    ) as err:
        preprocess.run(spark, [src], f"file://{out}", params(ref_uri, day="2013-01-09"))
    assert "dt=2013-01-10" in str(err.value) and failure.is_refusal(err.value)
    assert not out.exists()


def test_an_incomplete_snapshot_is_waited_for_not_passed_over(spark, tmp_path):
    """The newest snapshot on or before the day without `_SUCCESS` fails the day (retried),
    rather than joining the older one, which a rerun would not reproduce."""
    src, _ = land(spark, tmp_path)
    ref_uri = land_snapshots(tmp_path, {"2013-01-10": "10"})
    land_snapshots(tmp_path, {"2013-01-20": "20"}, complete=False)
    with pytest.raises(
        FileNotFoundError,
        match=r"snapshot .*dt=2013-01-20, the newest on or before 2013-01-25, is not complete",
    ) as err:
        preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri, day="2013-01-25"))
    assert not failure.is_refusal(err.value)


def test_snapshots_need_the_day_and_no_loose_files(spark, tmp_path):
    src, _ = land(spark, tmp_path)
    ref_uri = land_snapshots(tmp_path, {"2013-01-10": "10"})
    with pytest.raises(
        ValueError, match=r"reference 'weather' .* holds dated snapshots: the preprocess parameter `day`"
    ):
        preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri))
    (tmp_path / "snapshots" / "weather" / "old.csv").write_text(WEATHER_CSV)
    with pytest.raises(ValueError, match=r"holds dated snapshots and data files \[.*old.csv'\]"):
        preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri, day="2013-01-10"))
    with pytest.raises(ValueError, match=r"day '2013-1-10' must be the partition's date as YYYY-MM-DD"):
        params(ref_uri, day="2013-1-10")


def test_a_plain_reference_folder_is_recorded_as_no_history(spark, tmp_path):
    src, ref_uri = land(spark, tmp_path, rows=MAIN_ROWS[:4])
    report = preprocess.run(spark, [src], f"file://{tmp_path}/out", params(ref_uri, day="2013-01-01"))
    assert report["reference_snapshots"] == {"weather": {"uri": ref_uri, "snapshot": None}}


# ------------------------------------------------------------------- trimmed categoricals

PADDED = [("\tUA\t", "UA"), ("JFK\n", "JFK"), ("\r\nB6 \t", "B6"), ("\x0bAA\x0c", "AA"), (" \t\r\n", None)]


def test_categoricals_are_trimmed_of_ascii_whitespace_not_of_a_no_break_space(spark):
    rows = [(str(i), 0, 5, 1.0, raw, None) for i, (raw, _) in enumerate(PADDED)]
    rows.append(("nbsp", 0, 5, 1.0, "\u00a0UA", None))
    df = spark.createDataFrame(rows, MAIN_SCHEMA).withColumn("temp", spark_lit_none())
    got = {r["id"]: r["carrier"] for r in preprocess.clean_features(df, params("unused")).collect()}
    assert got == {**{str(i): clean for i, (_, clean) in enumerate(PADDED)}, "nbsp": "\u00a0UA"}


def spark_lit_none():
    from pyspark.sql import functions as F

    return F.lit(None).cast("double")


def test_padded_string_join_keys_match_and_keep_their_values(spark):
    main = spark.createDataFrame([(raw, i) for i, (raw, _) in enumerate(PADDED)], "origin string, n int")
    # The table's own keys padded too: " JFK" and "JFK\t" are one key (de-duplicated).
    table = spark.createDataFrame(
        [("UA", "1"), (" JFK", "2"), ("JFK\t", "2"), ("B6\r\n", "3"), ("AA", "4"), ("", "5")],
        "origin string, t string",
    )
    ref = {"name": "w", "join_keys": ["origin"], "columns": [{"name": "t", "expr": "CAST(t AS INT)"}]}
    joined = preprocess.join_references(main, [(ref, table)])
    assert joined.columns == ["origin", "n", "t", "_matched__w"]
    got = {r["n"]: (r["origin"], r["t"]) for r in joined.collect()}
    # Matched whatever the padding; the partition's values unchanged; blank matches nothing.
    assert got == {
        0: ("\tUA\t", 1),
        1: ("JFK\n", 2),
        2: ("\r\nB6 \t", 3),
        3: ("\x0bAA\x0c", 4),
        4: (" \t\r\n", None),
    }
