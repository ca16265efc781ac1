"""The dataset spec's JSON Schema and the knob defaults filled in before it is checked.

The schema says what one field may hold; what fields say together is `checks`.
"""

from __future__ import annotations

import copy
from typing import Any

from lakeprep_contracts import knobs, labels, records

ROLES = records.ROLES
FEATURE_ROLES = records.FEATURE_ROLES
TYPES = records.TYPES
FORMATS = records.TABLE_FORMATS  # a reference table's; the source may also be `text`

_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,62}$"}
_COLUMN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "role"],
    "properties": {
        "name": _NAME,
        "type": {"enum": list(TYPES)},
        "role": {"enum": list(ROLES)},
        "nullable": {"type": "boolean"},
        "expr": {"type": "string", "minLength": 1},
        "transform": knobs.column_transform_schema(),
        # The file's header (or JSON key) when it is not the contract name: exporters
        # write `Culmen Length (mm)`; the contract, derived columns and shards say
        # `culmen_length_mm`. Raw columns only.
        "raw_name": {"type": "string", "minLength": 1, "maxLength": 1024},
        # Values read as null in this column, replacing `source.null_tokens` ([] = none).
        "null_tokens": {"type": "array", "items": {"type": "string"}},
        # `ignore`: check_drift records the feature's drift but never flags it (a calendar
        # feature such as the weekday differs from the earlier days by design).
        "drift": {"enum": ["judge", "ignore"]},
    },
}
DEFAULT_TIME_ZONE = "UTC"
_READ_OPTIONS = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "propertyNames": {"pattern": "^[A-Za-z][A-Za-z0-9_.]*$"},
}

SPEC_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "source", "columns", "derived", "label"],
    "properties": {
        "name": _NAME,
        "description": {"type": "string"},
        "owner": {"type": "string"},
        "schedule": {"type": ["string", "null"]},
        "start_date": {"type": "string", "format": "date"},
        "end_date": {"type": ["string", "null"], "format": "date"},
        "catchup": {"type": "boolean"},
        # The dataset's zone (IANA): timestamps without an offset are read in it and
        # calendar functions in derived columns use it (Spark's session time zone).
        "time_zone": {"type": "string", "minLength": 1, "default": DEFAULT_TIME_ZONE},
        "source": {
            "type": "object",
            "additionalProperties": False,
            "required": ["uri", "format"],
            "properties": {
                "uri": {"type": "string", "pattern": r"\{ds\}"},
                # `text`: unstructured text into one string column (`text_column`).
                "format": {"enum": list(records.FORMATS)},
                "options": _READ_OPTIONS,
                "null_tokens": {"type": "array", "items": {"type": "string"}},
                "text_column": _NAME,
                "text_per": {"enum": list(records.TEXT_PER)},
                "min_files": {"type": "integer", "minimum": 0},
                "min_bytes": {"type": "integer", "minimum": 0},
                "timeout_seconds": {"type": "integer", "minimum": 1},
                "poke_interval_seconds": {"type": "integer", "minimum": 1},
                "deferrable": {"type": "boolean"},
            },
        },
        "columns": {"type": "array", "minItems": 1, "items": _COLUMN},
        "derived": {"type": "array", "items": _COLUMN},
        "label": {
            "type": "object",
            "additionalProperties": False,
            "required": ["column"],
            "properties": {
                "column": _NAME,
                # Classes (the default) or a numeric target binned into `bins` quantile
                # strata: lakeprep_contracts.labels.
                "type": {"enum": ["classes", labels.CONTINUOUS]},
                # Integer classes, or named ones (any JSON scalars): lakeprep_contracts.labels.
                "classes": {
                    "type": "array",
                    "minItems": 2,
                    "uniqueItems": True,
                    "items": {"type": ["integer", "string", "boolean", "number"]},
                },
                "bins": {"type": "integer", "minimum": 2, "maximum": 1000},
            },
            "if": {"properties": {"type": {"const": labels.CONTINUOUS}}, "required": ["type"]},
            "else": {"required": ["classes"]},
        },
        "references": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "uri", "format", "join_keys", "columns"],
                "properties": {
                    "name": _NAME,
                    "uri": {"type": "string"},
                    "format": {"enum": list(FORMATS)},
                    "options": _READ_OPTIONS,
                    "join_keys": {"type": "array", "minItems": 1, "items": _NAME},
                    "columns": {"type": "array", "minItems": 1, "items": _COLUMN},
                },
            },
        },
        "stages": {
            "type": "object",
            "additionalProperties": False,
            "properties": {g: knobs.group_schema(g) for g in knobs.STAGE_GROUPS},
        },
        **{g: knobs.group_schema(g) for g in knobs.TOP_LEVEL_GROUPS},
        # The `spark` knobs (`log_level`) plus `conf`, Spark's own settings by name.
        "spark": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                **knobs.group_schema("spark")["properties"],
                "conf": {
                    "type": "object",
                    "propertyNames": {"pattern": r"^spark\.[A-Za-z0-9_.\-]+$"},
                    "additionalProperties": {"type": "string"},
                },
            },
        },
    },
}


def fill_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Knob defaults (lakeprep_contracts.knobs) under what the file states."""
    data = copy.deepcopy(data)
    stages = data.setdefault("stages", {})
    if isinstance(stages, dict):
        for group in knobs.STAGE_GROUPS:
            given = stages.get(group) or {}
            if isinstance(given, dict):
                stages[group] = {**knobs.defaults(group), **given}
    for group in knobs.TOP_LEVEL_GROUPS:
        given = data.get(group) or {}
        if isinstance(given, dict):
            data[group] = {**knobs.defaults(group), **given}
    data.setdefault("derived", [])
    return data
