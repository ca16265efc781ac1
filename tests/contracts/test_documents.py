"""The document schemas and their checker: loaded as package data, problems by JSON path."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from lakeprep_contracts import documents

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"


@pytest.mark.parametrize("kind", documents.KINDS)
def test_every_schema_is_valid_draft_2020_12(kind):
    loaded = documents.schema(kind)
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(loaded)


def test_schema_returns_a_copy_of_the_cached_schema():
    first = documents.schema("manifest")
    first["required"].clear()
    assert "splits" in documents.schema("manifest")["required"]


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown document kind 'model'; expected one of \['manifest'"):
        documents.problems("model", {})


def test_problems_are_prefixed_by_their_json_path():
    doc = {
        "format_version": 1,
        "partition": "file:///lake/validate/x/dt=2013-01-01",
        "rows": 3,
        "columns": {
            "c": {
                "kind": "categorical",
                "count": 3,
                "nulls": 0,
                "distinct_estimate": 1,
                "top": [{"value": "a", "count": 0}],
                "top_k": 0,
                "other_count": 0,
            }
        },
    }
    assert documents.problems("stats", doc) == [
        "columns.c.top[0].count: 0 is less than the minimum of 1",
        "columns.c.top_k: 0 is less than the minimum of 1",
    ]
    assert documents.problems("stats", []) == ["<top level>: [] is not of type 'object'"]


def test_an_integer_field_refuses_a_float_even_a_whole_one():
    doc = {"format_version": 1, "partition": "p", "rows": 3.0, "columns": {}}
    assert documents.problems("stats", doc) == ["rows: 3.0 is not of type 'integer'"]
    assert documents.problems("stats", {**doc, "rows": True}) == ["rows: True is not of type 'integer'"]
    assert documents.problems("stats", {**doc, "rows": 3}) == []


def test_dates_are_checked_as_dates():
    report = {
        "format_version": 1,
        "logical_date": "2013-02-30",
        "partition": "p",
        "reference_partitions": [],
        "params": {
            "psi_threshold": 0.25,
            "jsd_threshold": 0.1,
            "action": "warn",
            "min_reference_days": 1,
            "bins": 10,
        },
        "features": {},
        "drifting": [],
        "status": "no_reference",
    }
    assert documents.problems("drift", report) == ["logical_date: '2013-02-30' is not a 'date'"]


def test_require_raises_listing_every_problem():
    with pytest.raises(documents.DocumentError) as err:
        documents.require("stats", {"format_version": 2}, "file:///lake/x/_stats.json")
    assert err.value.kind == "stats" and err.value.where == "file:///lake/x/_stats.json"
    assert str(err.value) == (
        "invalid statistics file:///lake/x/_stats.json:\n"
        "  - <top level>: 'partition' is a required property\n"
        "  - <top level>: 'rows' is a required property\n"
        "  - <top level>: 'columns' is a required property\n"
        "  - format_version: 1 was expected"
    )
    assert isinstance(err.value, ValueError)


def test_schemas_load_from_a_zip_as_the_spark_jobs_ship_them(tmp_path):
    archive = tmp_path / "contracts.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in (CONTRACTS / "lakeprep_contracts").rglob("*"):
            if f.suffix in (".py", ".json"):
                zf.write(f, f.relative_to(CONTRACTS))
    code = (
        "import json, lakeprep_contracts.documents as d; "
        "print(json.dumps([d.__file__, sorted(d.schema('manifest')['properties'])[:2], "
        "d.problems('drift', {})[:1]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(archive), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    where, properties, problems = json.loads(out)
    assert where.startswith(str(archive))
    assert properties == ["balance", "class_weights"]
    assert problems == ["<top level>: 'format_version' is a required property"]
