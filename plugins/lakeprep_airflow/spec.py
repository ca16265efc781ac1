"""Dataset specs: one YAML file per dataset, validated, turned into per-stage parameters.

A spec is the single place where a dataset's facts live (where raw partitions land, the
column contract and roles, reference tables, every stage's knobs). The DAG factory reads
it at parse time (cheap: YAML + jsonschema, and the sqlglot expression checks only for
expressions not seen to pass before: `load_spec(checks_cache=...)`) and each stage
operator reads it again when it starts, with every check, so a spec edited between parse
and run is re-validated before any Spark job sees it. Spark jobs never read the spec:
they get the slice they need as `--params` JSON (see `stage_params`).
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lakeprep_contracts import knobs, labels, layout, pipeline, records
from lakeprep_contracts.text import SUBWORD

logger = logging.getLogger(__name__)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROLES = records.ROLES
FEATURE_ROLES = records.FEATURE_ROLES
TYPES = records.TYPES
FORMATS = records.TABLE_FORMATS  # a reference table's; the source may also be `text`
# Daily stages read one partition and keep no fitted state (safe for many days in
# parallel); window stages run once per run over the window's sampled days.
DAILY_STAGES = pipeline.DAILY_STAGES
WINDOW_STAGES = pipeline.WINDOW_STAGES
STAGES = pipeline.STAGES  # the Spark stages, in pipeline order

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


class SpecError(ValueError):
    """A dataset spec is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class DatasetSpec:
    """A validated dataset spec (the parsed YAML with defaults filled in)."""

    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def dag_id(self) -> str:
        return f"lakeprep_{self.name}"

    @property
    def stages(self) -> dict[str, dict[str, Any]]:
        return self.data["stages"]

    @property
    def training(self) -> dict[str, Any]:
        return self.data["training"]

    @property
    def source(self) -> dict[str, Any]:
        return self.data["source"]

    def all_columns(self) -> list[dict[str, Any]]:
        """Raw, derived and reference columns, in the order they are produced."""
        cols = [*self.data["columns"], *self.data["derived"]]
        for ref in self.data.get("references", []):
            cols.extend(ref["columns"])
        return cols

    def columns_with_role(self, role: str) -> list[str]:
        return [c["name"] for c in self.all_columns() if c["role"] == role]

    def with_overrides(self, overrides: dict[str, Any]) -> DatasetSpec:
        """Return a re-validated copy with dotted-path overrides applied.

        Trigger-form values (``{"stages.sample.seed": 3}``) land here, so they pass the same
        schema as the file: a bad value is refused before any job starts.
        """
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            *parents, leaf = dotted.split(".")
            node = data
            for key in parents:
                if not isinstance(node.get(key), dict):
                    raise SpecError(f"{self.path}: override {dotted!r} does not name a spec field")
                node = node[key]
            if leaf not in node:
                raise SpecError(f"{self.path}: override {dotted!r} does not name a spec field")
            node[leaf] = value
        return _validated(self.path, data)


def _fill_defaults(data: dict[str, Any]) -> dict[str, Any]:
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


def _field_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def _validated(path: Path, raw: Any, checks_cache: Path | None = None) -> DatasetSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    data = _fill_defaults(raw)
    validator = jsonschema.Draft202012Validator(
        SPEC_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_field_path(e)}: {e.message}" for e in errors[:10]]
        raise SpecError(f"{path}: invalid dataset spec:\n  " + "\n  ".join(lines))
    spec = DatasetSpec(path=path, data=data)
    _check_semantics(spec, checks_cache)
    return spec


def _check_semantics(spec: DatasetSpec, checks_cache: Path | None = None) -> None:
    """What JSON Schema cannot say: unique names, exactly one id and label, typed raw columns."""
    where = spec.path
    seen: set[str] = set()
    for col in spec.all_columns():
        if col["name"] in seen:
            raise SpecError(f"{where}: column {col['name']!r} is declared twice")
        seen.add(col["name"])
    for i, col in enumerate(spec.data["columns"]):
        if "type" not in col:
            raise SpecError(f"{where}: columns.{i} ({col['name']}): raw columns need a 'type'")
        if "expr" in col:
            raise SpecError(
                f"{where}: columns.{i} ({col['name']}): raw columns cannot have 'expr'; "
                "put computed columns under 'derived'"
            )
    for i, col in enumerate(spec.data["derived"]):
        if "expr" not in col:
            raise SpecError(f"{where}: derived.{i} ({col['name']}): needs an 'expr'")
    for role in ("id", "label"):
        named = spec.columns_with_role(role)
        if len(named) != 1:
            raise SpecError(f"{where}: exactly one column must have role {role!r}, found {named}")
    if spec.columns_with_role("label")[0] != spec.data["label"]["column"]:
        raise SpecError(
            f"{where}: label.column {spec.data['label']['column']!r} is not the column "
            f"with role 'label' ({spec.columns_with_role('label')[0]!r})"
        )
    _check_label_type(spec)
    raw_names = {c["name"] for c in spec.data["columns"]}
    for ref in spec.data.get("references", []):
        missing = [k for k in ref["join_keys"] if k not in raw_names]
        if missing:
            raise SpecError(f"{where}: references.{ref['name']}.join_keys names {missing}, not raw columns")
    reserved = [c["name"] for c in spec.all_columns() if c["name"] in layout.RESERVED_COLUMNS]
    if reserved:
        raise SpecError(
            f"{where}: column name(s) {reserved} are reserved for the prepared data "
            f"{list(layout.RESERVED_COLUMNS)}; rename them (raw_name keeps the file's header)"
        )
    if not any(spec.columns_with_role(r) for r in FEATURE_ROLES):
        raise SpecError(f"{where}: no feature columns (roles {FEATURE_ROLES})")
    splits = spec.stages["sample"]["splits"]
    if abs(sum(splits.values()) - 1.0) > 1e-9 or splits["train"] <= 0:
        raise SpecError(f"{where}: stages.sample.splits {splits} must sum to 1 with train > 0")
    _check_continuous_label(spec)
    classes = labels.label_classes(spec.data["label"])
    clash = labels.problems(classes)
    if clash:
        raise SpecError(f"{where}: label.classes: {'; '.join(clash)}")
    known = {labels.class_text(c) for c in classes}
    extra = {labels.class_text(k) for k in spec.stages["sample"]["class_fractions"]} - known
    if extra:
        raise SpecError(
            f"{where}: stages.sample.class_fractions names classes {sorted(extra)} "
            f"not in label.classes {sorted(known)}"
        )
    _check_sample_strata(spec, known)
    fit = spec.stages["fit_transform"]
    if fit["pca_components"] is not None and fit["pca_variance"] is not None:
        raise SpecError(
            f"{where}: stages.fit_transform: pca_components {fit['pca_components']} and pca_variance "
            f"{fit['pca_variance']} are exclusive; set a number of components or a share of variance"
        )
    threshold = fit["selector_threshold"]
    if fit["selector_mode"] is not None and threshold is not None:
        mode = fit["selector_mode"]
        whole = mode == "numTopFeatures"
        if (whole and (threshold < 1 or threshold != int(threshold))) or (not whole and threshold > 1):
            wanted = "a whole number >= 1" if whole else "in [0, 1]"
            raise SpecError(
                f"{where}: stages.fit_transform.selector_threshold {threshold} must be {wanted} for {mode}"
            )
    start = spec.data.get("start_date")
    if spec.data.get("schedule") and not start:
        raise SpecError(f"{where}: a scheduled dataset needs start_date (YYYY-MM-DD)")
    _check_source(spec)
    _check_time_zone(spec)
    _check_expressions_once(spec, checks_cache)


# `label.classes` are integers and validate compares the label with them (Spark's `IN`);
# under ANSI rules a string label is cast to a number there, so a value such as `Adelie`
# fails the whole day with a cast error naming no column, and a boolean, date or
# timestamp label cannot be compared at all.
_INTEGER_LABEL_REFUSED = ("string", "boolean", "date", "timestamp")


def _check_label_type(spec: DatasetSpec) -> None:
    """A label column with a declared type holds values comparable to the integer classes
    (named classes compare with the label's text, whatever its type)."""
    label = spec.data["label"]
    if labels.is_continuous(label):
        refused = _CONTINUOUS_LABEL_REFUSED
        wanted = "a number: type it 'double' or 'int' ('string' quarantines values that are not numbers)"
    elif labels.is_integer(label["classes"]):
        refused = _INTEGER_LABEL_REFUSED
        wanted = None
    else:
        return
    for section in ("columns", "derived"):
        for i, col in enumerate(spec.data[section]):
            if col["name"] != label["column"] or col.get("type") not in refused:
                continue
            if wanted:
                raise SpecError(
                    f"{spec.path}: {section}.{i} ({col['name']}).type: the label column is typed "
                    f"{col['type']!r} but label.type is {labels.CONTINUOUS!r}, {wanted}"
                )
            raise SpecError(
                f"{spec.path}: {section}.{i} ({col['name']}).type: the label column is typed "
                f"{col['type']!r} but label.classes {label['classes']} are integers; type it 'int' "
                "if its values are those integers, or derive an integer label (e.g. `CASE WHEN "
                f"{col['name']} = '...' THEN 0 ... END` under derived, role label, named by "
                "label.column) and give this column another role, or list the values it holds "
                "as named classes (label.classes: [Adelie, Chinstrap, ...])"
            )


# A continuous label is read as a number; a boolean, date or timestamp is none.
_CONTINUOUS_LABEL_REFUSED = ("boolean", "date", "timestamp")

# What needs classes and has no meaning for a numeric target: (knob, refused when, why).
_CONTINUOUS_REFUSALS: tuple[tuple[str, Any, str], ...] = (
    ("stages.sample.class_fractions", bool, "per-class shares; the bins are sampled by `fraction`"),
    ("stages.sample.class_counts", bool, "per-class counts; the bins are sampled by `fraction`"),
    (
        "stages.balance.strategy",
        lambda v: v != "none",
        "balancing equalises classes, and a continuous label's bins hold equal rows already; set 'none'",
    ),
    ("stages.balance.augment", lambda v: v == "smote", "SMOTE interpolates within a class; use 'jitter'"),
    (
        "stages.export_shards.shards",
        lambda v: v == "encoded",
        "encoded shards do not carry the target; use 'prepared'",
    ),
)


def _check_continuous_label(spec: DatasetSpec) -> None:
    """`label.type: continuous`: no classes, no column named `target` (the prepared rows'
    value), and no knob that needs classes (`_CONTINUOUS_REFUSALS`)."""
    where, label = spec.path, spec.data["label"]
    if not labels.is_continuous(label):
        if "bins" in label:
            raise SpecError(f"{where}: label.bins applies to label.type {labels.CONTINUOUS!r} only")
        return
    if "classes" in label:
        raise SpecError(
            f"{where}: label.classes {label['classes']} is for a label of classes; a "
            f"{labels.CONTINUOUS!r} label has `bins` (its quantile strata) instead"
        )
    clash = [c["name"] for c in spec.all_columns() if c["name"] == labels.TARGET]
    if clash:
        raise SpecError(
            f"{where}: column {labels.TARGET!r} is the prepared rows' value of a "
            f"{labels.CONTINUOUS!r} label; rename it (raw_name keeps the file's header)"
        )
    for knob, refused, why in _CONTINUOUS_REFUSALS:
        section, name = knob.rsplit(".", 1)
        value = spec.stages[section.split(".", 1)[1]][name]
        if refused(value):
            raise SpecError(
                f"{where}: {knob} {value!r} is refused for label.type {labels.CONTINUOUS!r}: {why}"
            )


def _check_sample_strata(spec: DatasetSpec, known: set[str]) -> None:
    """`stages.sample`: class_counts name known classes (not also in class_fractions), and
    strata name the label (`label` or its column) or numeric/categorical features."""
    where = spec.path
    sample = spec.stages["sample"]
    extra = {labels.class_text(k) for k in sample["class_counts"]} - known
    if extra:
        raise SpecError(
            f"{where}: stages.sample.class_counts names classes {sorted(extra)} "
            f"not in label.classes {sorted(known)}"
        )
    both = sorted(
        {labels.class_text(k) for k in sample["class_counts"]}
        & {labels.class_text(k) for k in sample["class_fractions"]}
    )
    if both:
        raise SpecError(
            f"{where}: stages.sample: classes {both} are in both class_fractions and class_counts"
        )
    strata = sample["strata"]
    if strata is None:
        return
    label = spec.data["label"]["column"]
    features = [*spec.columns_with_role("numeric"), *spec.columns_with_role("categorical")]
    bad = [c for c in strata if c not in {layout.LABEL, label, *features}]
    if bad:
        raise SpecError(
            f"{where}: stages.sample.strata names {bad}: strata are the label ({label!r} or "
            f"{layout.LABEL!r}) or numeric/categorical features {features}"
        )
    if {layout.LABEL, label} <= set(strata):
        raise SpecError(f"{where}: stages.sample.strata names the label twice ({layout.LABEL!r}, {label!r})")
    if (sample["class_counts"] or sample["class_fractions"]) and not {layout.LABEL, label} & set(strata):
        raise SpecError(
            f"{where}: stages.sample.strata {strata} leave out the label ({label!r}), but "
            "class_fractions/class_counts are per class"
        )


def _sample_strata(spec: DatasetSpec) -> list[str] | None:
    """The sample's strata as columns of the prepared rows (the label column is `label`)."""
    strata = spec.stages["sample"]["strata"]
    label = spec.data["label"]["column"]
    return None if strata is None else [layout.LABEL if c == label else c for c in strata]


# validate decides how bad records are kept (PERMISSIVE, its corrupt-record column);
# DROPMALFORMED or FAILFAST would lose rows or a day.
_VALIDATE_OWNED_OPTIONS = ("mode", "columnNameOfCorruptRecord")


def _check_source(spec: DatasetSpec) -> None:
    """Header names, null tokens and the text format: what the raw files must look like."""
    where = spec.path
    source = spec.source
    computed = [(f"derived.{i}", c) for i, c in enumerate(spec.data["derived"])]
    for ref in spec.data.get("references", []):
        computed += [(f"references.{ref['name']}.columns.{i}", c) for i, c in enumerate(ref["columns"])]
    for field, col in computed:
        for key in ("raw_name", "null_tokens"):
            if key in col:
                raise SpecError(f"{where}: {field} ({col['name']}).{key}: applies to raw columns only")
    read_by: dict[str, str] = {}
    for i, col in enumerate(spec.data["columns"]):
        header = col.get("raw_name", col["name"])
        if header != header.strip():
            raise SpecError(
                f"{where}: columns.{i} ({col['name']}).raw_name: {header!r} has surrounding "
                "whitespace; headers are compared without it"
            )
        if header in read_by:
            raise SpecError(
                f"{where}: columns.{i} ({col['name']}): reads the file's column {header!r}, "
                f"already read by {read_by[header]!r}"
            )
        read_by[header] = col["name"]
    owned = {o.lower() for o in _VALIDATE_OWNED_OPTIONS}
    for key in source.get("options", {}):
        if key.lower() in owned:
            raise SpecError(
                f"{where}: source.options.{key}: set by validate itself (PERMISSIVE mode, "
                "bad records quarantined with a reason); remove it"
            )
    names = [c["name"] for c in spec.data["columns"]]
    if source["format"] == "text":
        text_column = source.get("text_column")
        if text_column is None:
            raise SpecError(f"{where}: source.text_column: format 'text' needs the column the text goes to")
        if names != [text_column] or spec.data["columns"][0]["type"] != "string":
            raise SpecError(
                f"{where}: source.text_column: format 'text' reads one string column, so columns "
                f"must be exactly [{{name: {text_column}, type: string, ...}}]; found {names}"
            )
        if "raw_name" in spec.data["columns"][0]:
            raise SpecError(f"{where}: columns.0 ({text_column}).raw_name: a text file has no header")
    else:
        for key in ("text_column", "text_per"):
            if key in source:
                raise SpecError(f"{where}: source.{key}: only for format 'text', not {source['format']!r}")


def _check_time_zone(spec: DatasetSpec) -> None:
    """`time_zone` is an IANA name, and Spark's session zone is not set apart from it."""
    import zoneinfo

    where = spec.path
    zone = spec.data.get("time_zone", DEFAULT_TIME_ZONE)
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
        raise SpecError(
            f"{where}: time_zone: {zone!r} is not an IANA time zone name (e.g. 'UTC', 'America/New_York')"
        ) from err
    conf = spec.data.get("spark", {}).get("conf", {}).get("spark.sql.session.timeZone")
    if conf is not None and conf != zone:
        raise SpecError(
            f"{where}: spark.conf.spark.sql.session.timeZone {conf!r} differs from time_zone {zone!r}; "
            "set time_zone only (stages get it as the session zone)"
        )


def _expression_inputs(spec: DatasetSpec) -> dict[str, Any]:
    """All that `_check_expressions` reads of a spec: the names it resolves against and the
    expressions, in order (so also what its cached outcome is keyed by)."""
    return {
        "raw_columns": [c["name"] for c in spec.data["columns"]],
        "source_file": layout.SOURCE_FILE,
        "derived": [[c["name"], c["expr"]] for c in spec.data["derived"]],
        "references": [
            [ref["name"], col["name"], col["expr"]]
            for ref in spec.data.get("references", [])
            for col in ref["columns"]
            if "expr" in col
        ],
    }


def _check_expressions_once(spec: DatasetSpec, checks_cache: Path | None) -> None:
    """`_check_expressions`, skipped when `checks_cache` records that the same inputs passed.

    The DAG processor forks a fresh child for every parse, and the check's first use of
    sqlglot in a process (its import, dialect and parser set-up) is most of a parse's own
    time (benchmarks/RESULTS.md (c)). So the DAG file passes a folder where a passed check
    leaves an empty marker named by the hash of the check's inputs (`_expression_inputs`),
    this module's source and the installed sqlglot (`_checks_code_version`): a spec, or
    code, that changed is checked again; a failed check leaves nothing, so a broken spec
    fails every parse. Tasks and `spec_check` pass no folder and run the check every time.
    """
    inputs = _expression_inputs(spec)
    marker = None
    if checks_cache is not None:
        code = _checks_code_version()
        if code is not None:
            payload = json.dumps({"inputs": inputs, "code": code}, sort_keys=True)
            marker = checks_cache / "spec-expressions" / hashlib.sha256(payload.encode()).hexdigest()
            if marker.exists():
                return
    _check_expressions(spec.path, inputs)
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError as err:  # an unwritable cache costs time, not correctness
            logger.debug("not recording the passed expression check of %s in %s: %s", spec.path, marker, err)


@cache
def _checks_code_version() -> str | None:
    """What else decides the expression check: this module's source and the installed sqlglot
    (None when either cannot be found: nothing is cached then).

    sqlglot is named by where its package is and its `__init__.py`'s size and modification
    time, which any reinstall changes: a stat, where `importlib.metadata.version` scans the
    path for distributions (3 ms of a parse).
    """
    import importlib.util

    found = importlib.util.find_spec("sqlglot")
    if found is None or found.origin is None:
        return None
    try:
        source = Path(__file__).read_bytes()
        installed = os.stat(found.origin)
    except OSError:
        return None
    return f"{hashlib.sha256(source).hexdigest()}/{found.origin}:{installed.st_size}:{installed.st_mtime_ns}"


def _check_expressions(where: Path, inputs: dict[str, Any]) -> None:
    """Every `expr` parses as Spark SQL; derived ones also resolve and translate for serving.

    Derived columns are computed by Spark in `validate` and by DuckDB when serving (the
    expression translated by sqlglot), so a derived `expr` must: be one row-level
    expression (no subquery, aggregate or window), refer only to raw contract columns,
    earlier derived columns and `_source_file`, use only functions sqlglot's Spark
    dialect knows, and translate to DuckDB without an unsupported construct. Reference
    columns are evaluated over the reference table, whose columns the spec does not
    declare: they only have to parse. sqlglot is imported here, not at module level, so
    a process that never checks a spec does not pay for it.
    """
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ErrorLevel, SqlglotError

    def parsed(field: str, expr: str) -> exp.Expression:
        try:
            trees = [t for t in sqlglot.parse(expr, read="spark") if t is not None]
        except SqlglotError as err:
            first = str(err).splitlines()[0]
            raise SpecError(f"{where}: {field}: {expr!r} does not parse as Spark SQL: {first}") from err
        if len(trees) != 1:
            raise SpecError(f"{where}: {field}: {expr!r} must be one expression, found {len(trees)}")
        return trees[0]

    known = {*inputs["raw_columns"], inputs["source_file"]}
    for name, expr in inputs["derived"]:
        field = f"derived.{name}"
        tree = parsed(field, expr)
        for kind, what in (
            (exp.Select, "a subquery"),
            (exp.Window, "a window"),  # before aggregates: lag() is one in sqlglot's tree
            (exp.AggFunc, "an aggregate"),
        ):
            if tree.find(kind) is not None:
                raise SpecError(f"{where}: {field}: {expr!r} holds {what}; derived columns are per row")
        # Spark and DuckDB resolve unquoted names case-insensitively; contract names are lower case.
        refs = sorted({c.parts[0].name.lower() for c in tree.find_all(exp.Column)} - known)
        if refs:
            raise SpecError(
                f"{where}: {field}: {expr!r} refers to {refs}, which are neither raw contract "
                f"columns nor earlier derived columns (known here: {sorted(known)}; raw columns "
                "go by their contract name, not raw_name)"
            )
        unknown = sorted({f.name for f in tree.find_all(exp.Anonymous)})
        if unknown:
            raise SpecError(
                f"{where}: {field}: {expr!r} calls {unknown}, not Spark SQL functions sqlglot knows, "
                "so it cannot be translated for serving (DuckDB); use a known function"
            )
        try:
            sqlglot.transpile(expr, read="spark", write="duckdb", unsupported_level=ErrorLevel.RAISE)
        except SqlglotError as err:
            first = str(err).splitlines()[0]
            raise SpecError(
                f"{where}: {field}: {expr!r} does not translate to DuckDB for serving: {first}"
            ) from err
        known.add(name)
    for ref, name, expr in inputs["references"]:
        parsed(f"references.{ref}.columns.{name}", expr)


def load_spec(path: str | os.PathLike[str], *, checks_cache: Path | None = None) -> DatasetSpec:
    """Read and validate one spec file. Raises SpecError naming the file and field.

    :param checks_cache: a folder where expression checks that passed are recorded, so the
        same expressions under the same code are not checked again (`_check_expressions_once`:
        for the DAG file, parsed in a fresh process every few seconds). Without it every
        check runs.
    """
    path = Path(path)
    try:
        # libyaml's C loader when present: the pure-Python one is ~10x slower at every parse.
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)
    except OSError as err:
        raise SpecError(f"{path}: cannot read dataset spec: {err}") from err
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {err}") from err
    spec = _validated(path, raw, checks_cache)
    if path.stem != spec.name:
        raise SpecError(f"{path}: file name must match name {spec.name!r} ({spec.name}.yaml)")
    return spec


@cache
def _default_pipelines_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "pipelines"


def pipelines_dir() -> Path:
    """Where dataset specs live: $LAKEPREP_PIPELINES_DIR, else `<repo>/pipelines`."""
    env = os.environ.get("LAKEPREP_PIPELINES_DIR")
    return Path(env) if env else _default_pipelines_dir()


def discover_specs(directory: Path | None = None) -> list[Path]:
    directory = directory or pipelines_dir()
    return sorted(directory.glob("*.yaml"))


# --------------------------------------------------------------------------- stage params


REPORT_NAME = layout.REPORT


def lake_uri(lake_root: str, stage: str, dataset: str, ds: str) -> str:
    """The lake layout (lakeprep_contracts.layout): `<lake>/<stage>/<dataset>/dt=YYYY-MM-DD`."""
    return layout.partition_uri(lake_root, stage, dataset, ds)


def expand(template: str, *, lake_root: str, ds: str | None = None) -> str:
    """Fill `{lake}` and `{ds}` in a spec URI template."""
    return template.replace("{lake}", lake_root.rstrip("/")).replace("{ds}", ds or "{ds}")


def window_dates(ds: str, days: int) -> list[str]:
    """The `days` logical dates ending at `ds`, oldest first."""
    end = dt.date.fromisoformat(ds)
    return [(end - dt.timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]


def run_window(spec: DatasetSpec, ds: str) -> list[str]:
    """The run's window: `window.days` dates ending at `ds`, oldest first."""
    return window_dates(ds, spec.data["window"]["days"])


def _feature_columns(spec: DatasetSpec) -> dict[str, list[str]]:
    return {role: spec.columns_with_role(role) for role in FEATURE_ROLES}


def _validate_params(spec: DatasetSpec) -> dict[str, Any]:
    label = spec.data["label"]
    source = spec.source
    own = [*spec.data["columns"], *spec.data["derived"]]
    return {
        **spec.stages["validate"],
        "format": source["format"],
        "options": source.get("options", {}),
        "null_tokens": source.get("null_tokens", []),
        "text_column": source.get("text_column"),
        "text_per": source.get("text_per", "line"),
        "time_zone": spec.data.get("time_zone", DEFAULT_TIME_ZONE),
        "columns": [
            {
                "name": c["name"],
                "type": c["type"],
                "nullable": c.get("nullable", True),
                **{k: c[k] for k in ("raw_name", "null_tokens") if k in c},
            }
            for c in spec.data["columns"]
        ],
        "derived": [{"name": c["name"], "expr": c["expr"]} for c in spec.data["derived"]],
        "id_column": spec.columns_with_role("id")[0],
        "label_column": label["column"],
        # A continuous label is checked as a number (lakeprep_contracts.labels).
        **(
            {"label_type": labels.CONTINUOUS}
            if labels.is_continuous(label)
            else {"label_classes": label["classes"]}
        ),
        # `_stats.json` profiles the features validate has (reference columns join later), and
        # a continuous label's value, which check_drift judges against the window's as a numeric.
        "stats_kinds": {
            **{c["name"]: c["role"] for c in own if c["role"] in FEATURE_ROLES},
            **({label["column"]: "numeric"} if labels.is_continuous(label) else {}),
        },
    }


def _preprocess_params(spec: DatasetSpec, lake_root: str, ds: str) -> dict[str, Any]:
    from lakeprep_contracts.text import TOKENIZER

    return {
        **spec.stages["preprocess"],
        "references": [
            {
                "name": r["name"],
                "uri": expand(r["uri"], lake_root=lake_root, ds=ds),
                "format": r["format"],
                "options": r.get("options", {}),
                "join_keys": r["join_keys"],
                "columns": [{"name": c["name"], "expr": c.get("expr", c["name"])} for c in r["columns"]],
            }
            for r in spec.data.get("references", [])
        ],
        "id_column": spec.columns_with_role("id")[0],
        "label_column": spec.data["label"]["column"],
        # A named class's id or a continuous label's bin (lakeprep_contracts.labels).
        **_preprocess_label(spec.data["label"]),
        # The partition's day: a reference of dated snapshots joins the newest on or before
        # it (lakeprep_contracts.references), so a backfill never joins later facts.
        "day": ds,
        "tokenizer": TOKENIZER,
        # Texts a tokenizer file encodes stay text (only where there are any: other specs'
        # params are unchanged).
        **({"subword_text": subword} if (subword := _subword_text(spec)) else {}),
        # Reference-table features are profiled here (validate profiles the raw ones).
        "stats_kinds": {
            c["name"]: c["role"]
            for r in spec.data.get("references", [])
            for c in r["columns"]
            if c["role"] in FEATURE_ROLES
        },
        **_feature_columns(spec),
    }


def _preprocess_label(label: dict[str, Any]) -> dict[str, Any]:
    """What preprocess writes as the label: a continuous label's quantile bins (the value
    as `target`), a named class's id, or (no key) an integer label as it is."""
    if labels.is_continuous(label):
        return {"label_bins": labels.bins(label)}
    return {"label_classes": classes} if labels.names(classes := label["classes"]) else {}


def column_transforms(spec: DatasetSpec, lake_root: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per feature, the transform settings: the stage's knobs under the column's overrides."""
    stage = spec.stages["fit_transform"]
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in FEATURE_ROLES}
    for col in spec.all_columns():
        role = col["role"]
        if role not in FEATURE_ROLES:
            continue
        given = col.get("transform", {})
        for key in given:
            roles = (knobs.COLUMN_TRANSFORM_KEYS.get(key) or knobs.COLUMN_ONLY_KEYS[key])[1]
            if role not in roles:
                raise SpecError(
                    f"{spec.path}: column {col['name']!r} ({role}): transform.{key} applies to "
                    f"{roles} columns only"
                )
        settings = {"name": col["name"]}
        for key, (knob_name, roles) in knobs.COLUMN_TRANSFORM_KEYS.items():
            if role in roles:
                settings[key] = given.get(key, stage[knob_name])
        if role == "categorical" and settings["encoding"] == SUBWORD:
            raise SpecError(
                f"{spec.path}: column {col['name']!r} (categorical): encoding {SUBWORD!r} is for text "
                "columns; use vocab or hash"
            )
        if role == "text":
            settings["min_frequency"] = given.get("min_frequency", stage["text_min_frequency"])
            settings["encoding"] = given.get("encoding", stage["text_encoding"])
            if settings["encoding"] == SUBWORD and "tokenizer_model" in given:
                if "tokenizer" in given:
                    raise SpecError(
                        f"{spec.path}: column {col['name']!r}: give transform.tokenizer (a tokenizer "
                        "file) or transform.tokenizer_model (one trained on the window), not both"
                    )
                settings["tokenizer_model"] = given["tokenizer_model"]
            elif settings["encoding"] == SUBWORD:
                settings["tokenizer"] = _tokenizer_uri(spec, col, given, lake_root)
            for key in ("tokenizer", "tokenizer_model"):
                if key in given and settings["encoding"] != SUBWORD:
                    raise SpecError(
                        f"{spec.path}: column {col['name']!r}: transform.{key} is used by encoding "
                        f"{SUBWORD!r} only; this column's encoding is {settings['encoding']!r}"
                    )
        out[role].append(settings)
    return out


def _tokenizer_uri(
    spec: DatasetSpec, col: dict[str, Any], given: dict[str, Any], lake_root: str | None
) -> str:
    """The column's tokenizer.json URI (`transform.tokenizer`, `{lake}` expanded when known)."""
    uri = given.get("tokenizer")
    if not uri:
        raise SpecError(
            f"{spec.path}: text column {col['name']!r}: encoding {SUBWORD!r} needs transform.tokenizer, "
            "the URI of the Hugging Face tokenizer.json the model ships with (e.g. "
            "'{lake}/tokenizers/bert-base-uncased.json'), or transform.tokenizer_model (wordpiece "
            "or bpe) to train one on the window's train split"
        )
    return uri if lake_root is None else expand(uri, lake_root=lake_root)


def _subword_text(spec: DatasetSpec) -> list[str]:
    return [t["name"] for t in column_transforms(spec)["text"] if t["encoding"] == SUBWORD]


def _subword_texts(spec: DatasetSpec, lake_root: str) -> list[dict[str, Any]]:
    """{name, tokenizer URI, max_tokens} of each text a tokenizer file encodes (a tokenizer
    trained on the window does not exist when the day is sampled: its texts are not counted)."""
    return [
        {"name": t["name"], "tokenizer": t["tokenizer"], "max_tokens": t["max_tokens"]}
        for t in column_transforms(spec, lake_root)["text"]
        if t["encoding"] == SUBWORD and "tokenizer" in t
    ]


def _fit_profile(spec: DatasetSpec) -> dict[str, Any]:
    """What each sampled day profiles for the window's fit (`_fit_statistics.json`)."""
    from lakeprep_contracts.day_statistics import profile_of

    fit = spec.stages["fit_transform"]
    pca = fit.get("pca_components") is not None or fit.get("pca_variance") is not None
    columns = column_transforms(spec)
    continuous = labels.is_continuous(spec.data["label"])
    return profile_of(
        columns["numeric"],
        columns["categorical"],
        columns["text"],
        cross_products=pca,
        target=continuous,
        # F-regression against the target needs each numeric's products with it.
        target_products=continuous and fit["selector_mode"] is not None,
    )


def _fit_label(label: dict[str, Any]) -> dict[str, Any]:
    """The fit's label knobs: a continuous label's type (the transform standardises its
    target, and univariate selection tests the numerics against it by F-regression), or
    named classes' id -> class map; nothing for integer classes."""
    if labels.is_continuous(label):
        return {"label_type": labels.CONTINUOUS, "selector_label_type": "continuous"}
    return {"label_names": names} if (names := labels.names(label["classes"])) else {}


def _window_params(spec: DatasetSpec, lake_root: str, ds: str, run_id: str) -> dict[str, Any]:
    label = spec.data["label"]
    return {
        "dataset": spec.name,
        "logical_date": ds,
        "run_id": run_id,
        "id_column": spec.columns_with_role("id")[0],
        "label_column": label["column"],
        # After preprocess the label is the stored class (the id of a named class).
        "label_classes": labels.stored_classes(labels.label_classes(label)),
    }


def _sample_params(spec: DatasetSpec) -> dict[str, Any]:
    """`stages.sample` with its per-class knobs keyed by the stored label (the class's id for
    named classes, as the prepared rows hold it)."""
    sample = spec.stages["sample"]
    classes = labels.label_classes(spec.data["label"])
    return {
        **sample,
        **{
            knob: labels.stored_keys(classes, sample[knob], f"{spec.path}: stages.sample.{knob}")
            for knob in ("class_fractions", "class_counts")
        },
        "label_classes": labels.stored_classes(classes),
    }


def stage_params(
    spec: DatasetSpec,
    stage: str,
    *,
    lake_root: str,
    ds: str,
    run_id: str,
    window: dict[str, list[str]] | None = None,
) -> dict:
    """The JSON a Spark stage receives as `--params`: only what that stage needs.

    Window stages also get `window`: which of the window's days were read and which were
    not (failed, missing, before the dataset's start), from `wait_for_window`.
    """
    if stage == "validate":
        return _validate_params(spec)
    if stage == "preprocess":
        return _preprocess_params(spec, lake_root, ds)
    if stage == "sample":
        return {
            **_sample_params(spec),
            "strata": _sample_strata(spec),
            "fit_profile": _fit_profile(spec),
            # The day's shards are ordered by the balance hash (lakeprep_jobs.day_shards).
            "balance_seed": spec.stages["balance"]["seed"],
            # Truncation by each tokenizer file, counted per day (only where a text has one).
            **({"subword_texts": texts} if (texts := _subword_texts(spec, lake_root)) else {}),
        }
    if stage == "fit_transform":
        return {
            **spec.stages["fit_transform"],
            **_window_params(spec, lake_root, ds, run_id),
            # The id -> class map of named classes, for the transform (lakeprep_contracts.labels).
            **_fit_label(spec.data["label"]),
            **column_transforms(spec, lake_root),
            "contract": {
                "validate": _validate_params(spec),
                "preprocess": _preprocess_params(spec, lake_root, ds),
            },
        }
    if stage == "export_shards":
        return {
            **spec.stages["export_shards"],
            **_window_params(spec, lake_root, ds, run_id),
            "config_hash": config_hash(spec),
            "world_size": spec.training["world_size"],
            "window": window or {},
            "balance": spec.stages["balance"],  # the train split only, inside the export
            "transform_uri": layout.join(
                lake_uri(lake_root, "fit_transform", spec.name, ds), layout.TRANSFORM
            ),
        }
    raise SpecError(f"unknown stage {stage!r}; expected one of {STAGES}")


def stage_io(
    spec: DatasetSpec, stage: str, *, lake_root: str, ds: str, window_days: Sequence[str] | None = None
) -> tuple[list[str], str]:
    """(input URIs, output URI) of a stage for one logical date: the lake layout's wiring.

    Window stages read the sampled partitions of `window_days` (the window's complete
    days, oldest first, ending with the run's own), as `wait_for_window` decided.
    """
    if stage not in STAGES:
        raise SpecError(f"unknown stage {stage!r}; expected one of {STAGES}")
    output = lake_uri(lake_root, stage, spec.name, ds)
    if stage == "validate":
        return [expand(spec.source["uri"], lake_root=lake_root, ds=ds)], output
    if stage in WINDOW_STAGES:
        days = list(window_days) if window_days is not None else [ds]
        if not days or days[-1] != ds:
            raise SpecError(f"window days {days} must end with the run's own date {ds}")
        return [lake_uri(lake_root, "sample", spec.name, d) for d in days], output
    previous = STAGES[STAGES.index(stage) - 1]
    return [lake_uri(lake_root, previous, spec.name, ds)], output


def config_hash(spec: DatasetSpec) -> str:
    """A stable fingerprint of everything that shapes the data (recorded in the manifest)."""
    # Knobs declared with `shapes_data=False` (how much Spark logs, fused stages, retries)
    # are left out: a run at INFO, fused, retried, exports what the defaults export.
    data = dict(spec.data)
    for group in knobs.TOP_LEVEL_GROUPS:
        run_only = {k.name for k in knobs.KNOBS[group] if not k.shapes_data}
        kept = {k: v for k, v in data.get(group, {}).items() if k not in run_only}
        if kept:
            data[group] = kept
        else:
            data.pop(group, None)
    payload = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()
