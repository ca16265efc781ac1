"""What JSON Schema cannot say about a spec: the fields checked against each other.

Unique column names, exactly one id and label, a label typed to match its classes, the
sample's classes and strata, the source's headers and text format, the time zone; and the
expressions (`expressions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakeprep_airflow.spec.dataset_spec import SpecError
from lakeprep_airflow.spec.expressions import check_expressions_once
from lakeprep_airflow.spec.schema import DEFAULT_TIME_ZONE, FEATURE_ROLES
from lakeprep_contracts import labels, layout

if TYPE_CHECKING:
    from pathlib import Path

    from lakeprep_airflow.spec.dataset_spec import DatasetSpec


def check_semantics(spec: DatasetSpec, checks_cache: Path | None = None) -> None:
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
    check_expressions_once(spec, checks_cache)


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
