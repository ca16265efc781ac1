"""Raw files as they really break, end to end through `validate.run`.

The corpus is `tests/data/broken/` (small files as exporters write them, for the order
feed of `tests/data/orders.py`) plus what cannot sit in a text file (invalid UTF-8,
compressed parts, a 1 MB value, a BOM with CRLF, zero-byte files), made here. Every case
has one defined outcome, listed in docs/SPEC.md ("Bad input: outcomes"): rows quarantined
with a reason, a value repaired by policy (a null token read as null), rows passed on
purpose (unseen categories, duplicates, which `preprocess` de-duplicates), or a
ContractError naming the partition and the column. Whatever the outcome, the accounting
balances for every file.
"""

from __future__ import annotations

import bz2
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lakeprep_airflow.partition_status import check_partition
from lakeprep_jobs import failure, lake_io, validate
from lakeprep_jobs.validate import ContractError, ValidateParams
from tests.data.orders import HEADER, INVALID_UTF8, corpus, validate_params

MB = 1 << 20


def params(**kw) -> ValidateParams:
    """The order feed's contract (`tests.data.orders`)."""
    return ValidateParams(**validate_params(**kw))


@dataclass(frozen=True)
class Case:
    files: dict[str, bytes]  # file name in the partition -> its bytes
    rows_in: int = 0
    rows_out: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    extra_columns: tuple[str, ...] = ()
    error: str | None = None  # a ContractError matching this, instead of a report
    format: str = "csv"


CASES = {
    "baseline": Case({"part-00000.csv": corpus("good.csv")}, 4, 4),
    # Too many fields, too few, and a whitespace-only line are malformed records; a blank
    # line is no record at all (RFC 4180; Spark skips it).
    "malformed lines": Case({"part-00000.csv": corpus("malformed_lines.csv")}, 5, 2, {"malformed record": 3}),
    "wrong types": Case(
        {"part-00000.csv": corpus("wrong_types.csv")},
        6,
        1,
        {"bad double in amount": 2, "bad timestamp in placed_at": 1, "bad int in delayed": 2},
    ),
    "null label": Case(
        {"part-00000.csv": corpus("null_label.csv")},
        4,
        1,
        {"null label (label)": 2, "label label not in [0, 1]": 1},
    ),
    "unseen categories pass": Case({"part-00000.csv": corpus("unseen_categories.csv")}, 3, 3),
    "NaN and infinities": Case(
        {"part-00000.csv": corpus("non_finite.csv")}, 6, 1, {"non-finite double in amount": 5}
    ),
    "duplicate rows pass (preprocess de-duplicates)": Case(
        {"part-00000.csv": corpus("duplicate_rows.csv")}, 4, 4
    ),
    "null tokens are nulls": Case({"part-00000.csv": corpus("null_tokens.csv")}, 4, 2, {"null in kind": 2}),
    "zero-byte file beside a good one": Case(
        {"part-00000.csv": corpus("good.csv"), "part-00001.csv": b""}, 4, 4
    ),
    "header-only file beside a good one": Case(
        {"part-00000.csv": corpus("good.csv"), "part-00001.csv": corpus("header_only.csv")}, 4, 4
    ),
    "empty partition": Case({}, error=r"no rows \(empty partition\): 0 file\(s\)"),
    "only zero-byte files": Case(
        {"part-00000.csv": b""}, error=r"empty partition\): 1 file\(s\), 1 of them zero-byte"
    ),
    "added column": Case({"part-00000.csv": corpus("added_column.csv")}, 2, 2, extra_columns=("Coupon",)),
    "removed column": Case(
        {"part-00000.csv": corpus("good.csv"), "part-00001.csv": corpus("removed_column.csv")},
        error=r"required column\(s\) \[\"kind \('Kind'\)\"\] missing from \S+part-00001.csv",
    ),
    # Headers are one name once surrounding whitespace and case are ignored: which one holds
    # the column cannot be told (Spark renames CSV headers equal but for case `Kind2`/`kind6`).
    "headers equal but for surrounding whitespace": Case(
        {"part-00000.csv": HEADER.replace(b"\n", b", Amount (USD)\n") + b"w1,5,book,,,0,6\n"},
        error=r"part-00000.csv has headers \['Amount \(USD\)', ' Amount \(USD\)'\] for column 'amount' "
        r"\('Amount \(USD\)'\): they are one name once surrounding whitespace and case are ignored",
    ),
    "headers equal but for case": Case(
        {"part-00000.csv": HEADER.replace(b"\n", b",kind\n") + b"c1,5,book,,,0,toy\n"},
        error=r"has headers \['Kind', 'kind'\] for column 'kind'",
    ),
    "extra headers equal but for case": Case(
        {"part-00000.csv": HEADER.replace(b"\n", b",Coupon,coupon\n") + b"c1,5,book,,,0,a,b\n"},
        1,
        1,
        extra_columns=("Coupon", "coupon"),
    ),
    "JSON keys equal but for surrounding whitespace": Case(
        {"part-00000.jsonl": b'{"Order ID": "x1", "Kind": "book", " Kind": "toy", "Delayed": 0}\n'},
        error=r"has headers \[' Kind', 'Kind'\] for column 'kind'",
        format="json",
    ),
    "JSON keys equal but for case": Case(
        {"part-00000.jsonl": b'{"Order ID": "x1", "Kind": "book", "kind": "toy", "Delayed": 0}\n'},
        error=r"part-00000.jsonl has keys \[\['Kind', 'kind'\]\] that differ only in case",
        format="json",
    ),
    "reordered columns in one of two files": Case(
        {"part-00000.csv": corpus("good.csv"), "part-00001.csv": corpus("reordered_columns.csv")}, 6, 6
    ),
    "quoted newline, comma and doubled quotes": Case({"part-00000.csv": corpus("quoted_newline.csv")}, 3, 3),
    # RFC 4180: an open quote runs to the end of the file, so the rest is one record.
    "unterminated quote": Case(
        {"part-00000.csv": corpus("unterminated_quote.csv")}, 2, 1, {"malformed record": 1}
    ),
    "BOM and CRLF": Case(
        {"part-00000.csv": b"\xef\xbb\xbf" + corpus("quoted_newline.csv").replace(b"\n", b"\r\n")}, 3, 3
    ),
    "invalid UTF-8": Case(
        {"part-00000.csv": INVALID_UTF8},
        3,
        1,
        {"invalid UTF-8 in note": 1, "invalid UTF-8 in amount": 1},
    ),
    "1 MB string in a text field": Case(
        {"part-00000.csv": HEADER + b"b1,5,book,2013-01-01T05:00:00Z," + (b"lorem " * MB)[:MB] + b",0\n"},
        1,
        1,
    ),
    "gzip and bzip2 parts": Case(
        {
            "part-00000.csv.gz": gzip.compress(corpus("good.csv")),
            "part-00001.csv.bz2": bz2.compress(corpus("quoted_newline.csv")),
        },
        7,
        7,
    ),
    "JSON lines": Case(
        {"part-00000.jsonl": corpus("records.jsonl")},
        4,
        2,
        {"malformed record": 1, "bad double in amount": 1},
        extra_columns=("Extra",),
        format="json",
    ),
    # Jackson refuses invalid UTF-8 in JSON: the whole line is malformed.
    "JSON with invalid UTF-8": Case(
        {"part-00000.jsonl": b'{"Order ID": "x1", "Kind": "caf\xe9", "Delayed": 0}\n'},
        1,
        0,
        {"malformed record": 1},
        format="json",
    ),
}


def land(tmp_path: Path, files: dict[str, bytes]) -> str:
    part = tmp_path / "raw" / "orders" / "dt=2013-01-01"
    part.mkdir(parents=True)
    for name, data in files.items():
        (part / name).write_bytes(data)
    (part / "_SUCCESS").write_bytes(b"")
    return f"file://{part}"


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_broken_input_has_its_defined_outcome(spark, tmp_path, case):
    src = land(tmp_path, case.files)
    out = tmp_path / "validate" / "orders" / "dt=2013-01-01"
    p = params(format=case.format, options={} if case.format == "json" else {"header": "true"})
    if case.error:
        with pytest.raises(ContractError, match=case.error) as err:
            validate.run(spark, [src], f"file://{out}", p)
        assert "dt=2013-01-01" in str(err.value)
        # Inspectable, never complete: later stages and sensors refuse it.
        assert not check_partition(f"file://{out}").has_marker
        assert json.loads((out / lake_io.REPORT_NAME).read_text())["status"] == "failed"
        return
    report = validate.run(spark, [src], f"file://{out}", p)
    assert (report["rows_in"], report["rows_out"], report["quarantine_reasons"]) == (
        case.rows_in,
        case.rows_out,
        case.reasons,
    )
    assert tuple(report["extra_columns"]) == case.extra_columns
    assert sorted(f.rsplit("/", 1)[-1] for f in report["file_accounting"]) == sorted(case.files)
    for counts in report["file_accounting"].values():
        assert counts["rows_in"] == counts["rows_out"] + counts["rows_quarantined"]
    assert sum(c["rows_in"] for c in report["file_accounting"].values()) == report["rows_in"]
    assert (out / "_SUCCESS").exists()
    assert len(spark.read.parquet(f"file://{out}").collect()) == case.rows_out
    if case.reasons:
        quarantined = spark.read.parquet(f"file://{out}/_quarantine").collect()
        assert len(quarantined) == sum(case.reasons.values())
        assert all(r["_source_file"] and r["_reason"] for r in quarantined)


@pytest.mark.parametrize(
    ("options", "long", "limit"),
    [
        # A value just over the limit the spec set (the default is none).
        (
            {"maxCharsPerColumn": "100"},
            b"b1,5,book,,," + b"x" * 101 + b",0\n",
            r"maxCharsPerColumn \(100 characters\)",
        ),
        # A record just over Spark's default 20480 fields: what a feed without newlines makes.
        ({}, b",".join([b"x"] * 20481) + b"\n", r"more fields than maxColumns \(20480\)"),
    ],
    ids=["value over maxCharsPerColumn", "record over maxColumns"],
)
@pytest.mark.parametrize("where", ["after good rows", "the whole file"])
def test_a_record_over_the_csv_parsers_limit_is_refused_naming_the_file_and_the_limit(
    spark, tmp_path, options, long, limit, where
):
    """Spark's parser stops the file at such a record (MALFORMED_CSV_RECORD, no file, no
    limit); the partition is committed failed with a report, naming both."""
    files = {"a.csv": corpus("good.csv")}
    files["b.csv"] = corpus("good.csv") + long if where == "after good rows" else long.rstrip(b"\n")
    src = land(tmp_path, files)
    out = tmp_path / "out"
    with pytest.raises(ContractError, match=rf"dt=2013-01-01: \S+/b\.csv holds .*{limit}") as err:
        validate.run(spark, [src], f"file://{out}", params(options={"header": "true", **options}))
    assert "source.options" in str(err.value)
    assert failure.is_refusal(err.value)
    assert not (out / "_SUCCESS").exists()
    report = json.loads((out / lake_io.REPORT_NAME).read_text())
    assert (report["status"], report["error"]) == ("failed", str(err.value))


def test_quoted_fields_keep_their_newlines_commas_and_quotes(spark, tmp_path):
    src = land(tmp_path, {"a.csv": b"\xef\xbb\xbf" + corpus("quoted_newline.csv").replace(b"\n", b"\r\n")})
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, params())
    notes = {r["order_id"]: r["note"] for r in spark.read.parquet(out).collect()}
    # The BOM is not part of the first header name (else `Order ID` would be missing), and
    # Spark's CSV parser turns a quoted CRLF into LF.
    assert notes == {"q1": 'line one\nline two, with a comma and "quotes"', "q2": None, "q3": "a,b"}


def test_reordered_and_compressed_files_map_values_by_their_own_header(spark, tmp_path):
    src = land(
        tmp_path,
        {"a.csv": corpus("good.csv"), "b.csv.gz": gzip.compress(corpus("reordered_columns.csv"))},
    )
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, params())
    rows = {r["order_id"]: (r["amount"], r["kind"], r["label"]) for r in spark.read.parquet(out).collect()}
    assert rows["o1"] == (42.0, "toy", 1)
    assert rows["g4"] == (99.99, "game", 1)


def test_a_1_mb_value_passes_whole_and_is_profiled(spark, tmp_path):
    src = land(tmp_path, CASES["1 MB string in a text field"].files)
    out = tmp_path / "out"
    validate.run(spark, [src], f"file://{out}", params())
    assert len(spark.read.parquet(f"file://{out}").collect()[0]["note"]) == MB
    note = json.loads((out / "_stats.json").read_text())["columns"]["note"]
    assert note["length"]["max"] == MB
    assert note["top"][0] == {"value": "lorem", "count": MB // 6}  # and one cut-off "lore"


def test_unseen_categories_and_duplicates_reach_the_partition_unchanged(spark, tmp_path):
    src = land(tmp_path, {"a.csv": corpus("unseen_categories.csv"), "b.csv": corpus("duplicate_rows.csv")})
    out = f"file://{tmp_path}/out"
    validate.run(spark, [src], out, params())
    rows = spark.read.parquet(out).collect()
    assert {r["kind"] for r in rows if r["order_id"].startswith("u")} == {"furniture-2024", "BOOK", " book "}
    assert sorted(r["order_id"] for r in rows if r["order_id"].startswith("d")) == ["d1", "d1", "d2", "d2"]
