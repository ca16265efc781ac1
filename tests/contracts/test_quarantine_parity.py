"""validate (Spark) and serving (pyarrow) give the rows of the broken-file corpus the same
quarantine reasons (`lakeprep_contracts.records`).

Each file of `tests/data/broken/`, and invalid UTF-8 (which cannot sit in a text file),
goes through the Spark stage (`validate.run`) and through serving's contract check
(`serving.read_records`, `serving.check_contract`), under the feed's one contract
(`tests.data.orders`). A quarantined row is known on both sides by its contract columns'
raw values (validate keeps them in the quarantine's `_raw`), a passed row by its id.

Serving never rejects a row for its label: where validate quarantines a `null label`,
serving scores the row without one, and a label that is not a class is serving's reason
beside the row (`label_reasons`); both count here as the reason serving gives the row.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lakeprep_contracts import layout, records
from lakeprep_jobs import validate
from lakeprep_train import serving
from tests.data.orders import CORPUS, INVALID_UTF8, corpus, validate_params

REFUSED = "removed_column.csv"  # no `Kind`, a required column: refused as a whole
FILES = {
    **{p.name: (p.read_bytes(), "csv") for p in sorted(CORPUS.glob("*.csv")) if p.name != REFUSED},
    "records.jsonl": (corpus("records.jsonl"), "json"),
    "invalid_utf8.csv": (INVALID_UTF8, "csv"),
}

Row = tuple[tuple[str, str], ...]


def params(file_format: str) -> dict[str, Any]:
    options = {"header": "true"} if file_format == "csv" else {}
    return validate_params(format=file_format, options=options, allow_empty=True)


def raw_names(p: dict[str, Any]) -> list[str]:
    return [c.get("raw_name") or c["name"] for c in p["columns"]]


def id_raw_name(p: dict[str, Any]) -> str:
    return next(c.get("raw_name") or c["name"] for c in p["columns"] if c["name"] == p["id_column"])


def quarantined_row(values: dict[str, Any], p: dict[str, Any]) -> Row:
    """A row by its contract columns' raw values (the ones it has: JSON leaves out nulls)."""
    return tuple((name, values[name]) for name in raw_names(p) if values.get(name) is not None)


def land(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / name).write_bytes(data)
    return folder / name


def validate_reasons(spark, folder: Path, p: dict[str, Any]) -> Counter[tuple[Row, str | None]]:
    """(row, reason) of every row `validate.run` reads from `folder`."""
    out = folder.parent / "validated"
    report = validate.run(spark, [f"file://{folder}"], f"file://{out}", validate.ValidateParams(**p))
    rows: Counter[tuple[Row, str | None]] = Counter()
    if report["rows_out"]:
        for r in spark.read.parquet(f"file://{out}").select(p["id_column"]).collect():
            rows[((id_raw_name(p), r[0]),), None] += 1
    if report["rows_quarantined"]:
        quarantine = spark.read.parquet(f"file://{out}/{layout.QUARANTINE_DIR}")
        for reason, raw in quarantine.select(validate.REASON, validate.RAW).collect():
            rows[quarantined_row(json.loads(raw), p), reason] += 1
    assert sum(rows.values()) == report["rows_in"]
    return rows


def serving_reasons(path: Path, p: dict[str, Any], file_format: str) -> Counter[tuple[Row, str | None]]:
    """(row, reason) of every row serving reads from `path`: the row's reason, else its
    label's (`label_reasons`), else `null label` where it has none."""
    contract = serving.Contract.from_params(p)
    raw = serving.read_records(str(path), contract, file_format=file_format)
    checked = serving.check_contract(raw, contract)
    labels = checked.table.column(contract.label_column).to_pylist()
    values = {name: raw.columns[name].to_pylist() for name in raw_names(p) if name in raw.columns}
    rows: Counter[tuple[Row, str | None]] = Counter()
    for i in range(len(raw)):
        reason = checked.reasons[i] or checked.label_reasons[i]
        if reason is None and labels[i] is None:
            reason = records.null_label(contract.label_column)
        record = {name: column[i] for name, column in values.items()}
        row = quarantined_row(record, p) if reason else ((id_raw_name(p), record[id_raw_name(p)]),)
        rows[row, reason] += 1
    return rows


def test_validate_and_serving_give_each_row_of_the_corpus_the_same_reason(spark, tmp_path):
    differences = {}
    kinds: set[str] = set()
    for name, (data, file_format) in FILES.items():
        p = params(file_format)
        path = land(tmp_path / name / "raw", f"part-00000{Path(name).suffix}", data)
        spark_rows = validate_reasons(spark, path.parent, p)
        served_rows = serving_reasons(path, p, file_format)
        if spark_rows != served_rows:
            differences[name] = {
                "validate only": spark_rows - served_rows,
                "serving only": served_rows - spark_rows,
            }
        kinds |= {records.reason_kind(reason) for _, reason in spark_rows if reason}
    assert differences == {}
    # What the corpus is written to break: every reason of a classes label.
    assert kinds == {
        "malformed record",
        "invalid UTF-8 in amount",
        "invalid UTF-8 in note",
        "bad double in amount",
        "bad timestamp in placed_at",
        "bad int in delayed",
        "non-finite double in amount",
        "null in kind",
        "null label (label)",
        "label label not in [0, 1]",
    }


def test_a_file_without_a_required_column_is_refused_by_both(spark, tmp_path):
    p = params("csv")
    path = land(tmp_path / "raw", "part-00000.csv", corpus(REFUSED))
    with pytest.raises(validate.ContractError, match=r"required column\(s\) \[\"kind \('Kind'\)\"\] missing"):
        validate.run(spark, [f"file://{path.parent}"], f"file://{tmp_path}/out", validate.ValidateParams(**p))
    contract = serving.Contract.from_params(p)
    with pytest.raises(serving.ServingError, match=r"required column\(s\) \['Kind'\] missing"):
        serving.check_contract(serving.read_records(str(path), contract, file_format="csv"), contract)
