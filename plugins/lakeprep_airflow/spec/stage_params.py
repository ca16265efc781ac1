"""What each Spark stage gets from a spec: its `--params` JSON, its lake inputs and output.

Spark jobs never read the spec: `stage_params` hands each the slice it needs, `stage_io`
wires the lake layout, `config_hash` fingerprints what shapes the data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_airflow.spec.dataset_spec import SpecError
from lakeprep_airflow.spec.schema import DEFAULT_TIME_ZONE, FEATURE_ROLES
from lakeprep_contracts import knobs, labels, layout, pipeline
from lakeprep_contracts.text import SUBWORD

if TYPE_CHECKING:
    from lakeprep_airflow.spec.dataset_spec import DatasetSpec

# Daily stages read one partition and keep no fitted state (safe for many days in
# parallel); window stages run once per run over the window's sampled days.
DAILY_STAGES = pipeline.DAILY_STAGES
WINDOW_STAGES = pipeline.WINDOW_STAGES
STAGES = pipeline.STAGES  # the Spark stages, in pipeline order

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


def _sample_strata(spec: DatasetSpec) -> list[str] | None:
    """The sample's strata as columns of the prepared rows (the label column is `label`)."""
    strata = spec.stages["sample"]["strata"]
    label = spec.data["label"]["column"]
    return None if strata is None else [layout.LABEL if c == label else c for c in strata]


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
