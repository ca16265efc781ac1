"""The knob declarations: one place, from which the schema, defaults, form and docs come."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest

from lakeprep_contracts import knobs

REPO = Path(__file__).resolve().parents[2]


def test_docs_table_is_generated_from_the_declarations():
    text = (REPO / "docs" / "SPEC.md").read_text()
    block = re.search(r"<!-- knobs:begin -->\n(.*?)\n<!-- knobs:end -->", text, re.S)
    assert block, "docs/SPEC.md lost its knobs block"
    assert block.group(1) == knobs.markdown_table(), "run: python -m lakeprep_contracts.knobs"


@pytest.mark.parametrize("group", list(knobs.KNOBS))
def test_every_default_satisfies_its_own_schema(group):
    schema = knobs.group_schema(group)
    jsonschema.Draft202012Validator(schema).validate(knobs.defaults(group))


def test_groups_are_stages_or_top_level_sections():
    assert set(knobs.KNOBS) == set(knobs.STAGE_GROUPS) | set(knobs.TOP_LEVEL_GROUPS)


def test_column_overrides_name_fit_transform_knobs():
    names = {k.name for k in knobs.KNOBS["fit_transform"]}
    assert {target for target, _ in knobs.COLUMN_TRANSFORM_KEYS.values()} <= names


def test_form_fields_are_unique_and_describe_their_bounds():
    fields = knobs.form_knobs()
    assert len({k.form.param for _, k in fields}) == len(fields)
    assert dict((p, k.form.param) for p, k in fields)["stages.sample.fraction"] == "sample_fraction"
    assert knobs.describe_bounds(knobs.knob("sample", "fraction").schema) == "> 0 and <= 1"
    assert knobs.describe_bounds({"enum": ["a", "b"]}) == 'one of "a", "b"'
    assert knobs.describe_bounds({"type": "integer", "minimum": 1}) == ">= 1"


def test_parse_defaults_checks_and_refuses_unknown_names():
    assert knobs.parse("check_drift", None) == knobs.defaults("check_drift")
    assert knobs.parse("check_drift", {"bins": 20})["bins"] == 20
    with pytest.raises(ValueError, match=r"bins 1 must be >= 2 and <= 100"):
        knobs.parse("check_drift", {"bins": 1})
    with pytest.raises(ValueError, match=r"bins True must be >= 2 and <= 100"):
        knobs.parse("check_drift", {"bins": True})  # a boolean is not an integer knob
    with pytest.raises(TypeError, match=r"unknown drift parameter\(s\) \['psi'\]"):
        knobs.parse("check_drift", {"psi": 0.2}, what="drift")
