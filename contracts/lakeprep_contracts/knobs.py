"""Every stage's knobs, declared once.

A knob is a name, a default, a JSON Schema for its value and one line of docs. From
this declaration come the spec schema's `stages.<stage>` sections and their defaults
(`lakeprep_airflow.spec`), the trigger form's fields and bounds (`form` knobs, in
`lakeprep_airflow.dag_factory`), the knob table in docs/SPEC.md (`markdown_table`, kept
in sync by a test) and the keys each Spark job's params dataclass must accept (a test
compares them). Adding a knob is adding a line here and reading it in the stage.

    python -m lakeprep_contracts.knobs      # prints the docs table
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_FRACTION = {"type": "number", "minimum": 0, "maximum": 1}
_SEED = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_SCALINGS = ["standard", "minmax", "robust", "none"]
_IMPUTES = ["mean", "median"]
# The handoff's backends (lakeprep_airflow.backends has one module each).
TRAINING_BACKENDS = ["local", "spark", "kubernetes"]
# The `kubernetes` backend's job APIs (lakeprep_airflow.backends.kubernetes renders each).
KUBERNETES_APIS = ["trainjob", "pytorchjob"]
_DNS_NAME = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A Kubernetes Toleration (core/v1), as its API reference states the fields.
_TOLERATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "key": {"type": "string"},
        "operator": {"enum": ["Exists", "Equal"]},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
        "tolerationSeconds": {"type": "integer"},
    },
}
_ENCODINGS = ["vocab", "hash"]
# A text may also be encoded by a Hugging Face tokenizer file (its column's `transform.tokenizer`).
_TEXT_ENCODINGS = [*_ENCODINGS, "tokenizer"]
_QUANTILE_PAIR = {
    "type": ["array", "null"],
    "minItems": 2,
    "maxItems": 2,
    "items": {"type": "number", "minimum": 0, "maximum": 1},
}


@dataclass(frozen=True)
class FormField:
    """How a knob appears in the trigger form (`Param` in the DAG)."""

    param: str  # the form field's name: `{{ params.<param> }}`
    title: str
    section: str


@dataclass(frozen=True)
class Knob:
    name: str
    default: Any
    schema: dict[str, Any]
    doc: str
    form: FormField | None = None
    # False: it changes how the tasks run, not what they write (left out of the config hash).
    shapes_data: bool = True


# Group -> knobs. A group is a spec section: `stages.<stage>` for stages, else top level.
KNOBS: dict[str, tuple[Knob, ...]] = {
    "validate": (
        Knob(
            "max_quarantine_share",
            0.1,
            _FRACTION,
            "fail the partition above this share of quarantined rows (it is still written, "
            "without `_SUCCESS`, for inspection)",
        ),
        Knob("allow_empty", False, {"type": "boolean"}, "accept a partition with no rows"),
    ),
    "preprocess": (
        Knob(
            "deduplicate",
            True,
            {"type": "boolean"},
            "keep one row per id (the first by a hash of the whole row, so the choice does not "
            "depend on file order); exact and conflicting duplicates are counted",
        ),
        Knob(
            "text_max_length",
            65536,
            {"type": "integer", "minimum": 1, "maximum": 1 << 26},
            "characters of a text value kept before tokenizing (longer values are cut, counted)",
        ),
    ),
    "sample": (
        Knob(
            "fraction",
            1.0,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "share of each class kept, exactly per stratum, within one row per split",
            FormField("sample_fraction", "Sample fraction", "Sampling"),
        ),
        Knob(
            "class_fractions",
            {},
            {
                "type": "object",
                "additionalProperties": _FRACTION,
            },
            "per-class shares, keys are the classes as `label.classes` lists them (`1`, `setosa`); "
            "each stratum keeps exactly `floor(share * n + 1/2)` of its n rows, shared among its "
            "splits by largest remainder",
        ),
        Knob(
            "class_counts",
            {},
            {
                "type": "object",
                "additionalProperties": {"type": "integer", "minimum": 0},
            },
            "per-class rows kept per day, exactly (capped at the class's rows), shared among the "
            "class's strata and splits by size; instead of a fraction for those classes",
        ),
        Knob(
            "strata",
            None,
            {
                "type": ["array", "null"],
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,62}$"},
            },
            "columns whose values are the strata of the split and the sample: the label "
            "and/or numeric or categorical features, e.g. `[delayed, origin]`; `null`: the label",
        ),
        Knob(
            "stratify_splits",
            False,
            {"type": "boolean"},
            "`true`: exact split shares per stratum (largest remainder, rows in id-hash order; "
            "depends on the day's rows); `false`: a threshold on the id's hash (stable per id)",
        ),
        Knob(
            "seed",
            0,
            _SEED,
            "hash seed: same data and seed, same sample",
            FormField("seed", "Sampling seed", "Sampling"),
        ),
        Knob(
            "splits",
            {"train": 0.8, "validation": 0.1, "test": 0.1},
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["train", "validation", "test"],
                "properties": {k: _FRACTION for k in ("train", "validation", "test")},
            },
            "train/validation/test shares, by a seed-independent hash of the id (see `stratify_splits`)",
        ),
    ),
    "window": (
        Knob(
            "days",
            30,
            {"type": "integer", "minimum": 1, "maximum": 3660},
            "sampled days, ending at the run's date, that one run fits on and exports",
        ),
        Knob(
            "wait_timeout_seconds",
            6 * 3600,
            {"type": "integer", "minimum": 1},
            "how long `wait_for_window` waits for earlier days' runs to finish",
        ),
        Knob(
            "poke_interval_seconds",
            60,
            {"type": "integer", "minimum": 1},
            "how often `wait_for_window` looks",
        ),
    ),
    "tasks": (
        Knob(
            "retries",
            2,
            {"type": "integer", "minimum": 0, "maximum": 10},
            "how often Airflow retries a failed task of the dataset's DAGs (a killed stage, a lost "
            "NameNode or Spark master); refusals of bad input fail without retries",
            shapes_data=False,
        ),
        Knob(
            "retry_delay_seconds",
            120,
            {"type": "integer", "minimum": 0, "maximum": 86400},
            "the wait before a retry",
            shapes_data=False,
        ),
    ),
    "check_drift": (
        Knob(
            "psi_threshold",
            0.25,
            {"type": "number", "exclusiveMinimum": 0},
            "smallest population stability index that is drift; a numeric's bound is the larger of "
            "this and what sampling noise reaches (`alpha`)",
        ),
        Knob(
            "jsd_threshold",
            0.1,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "smallest Jensen-Shannon distance that is drift; a categorical's or text's bound is the "
            "larger of this and what sampling noise reaches (`alpha`)",
        ),
        Knob(
            "action",
            "warn",
            {"enum": ["warn", "stop"]},
            "`warn`: record and log; `stop`: fail before fitting, naming feature, value, threshold",
        ),
        Knob(
            "min_reference_days",
            1,
            {"type": "integer", "minimum": 1},
            "earlier days needed before drift is judged",
        ),
        Knob(
            "bins",
            10,
            {"type": "integer", "minimum": 2, "maximum": 100},
            "PSI bins: quantiles of the pooled earlier days",
        ),
        Knob(
            "alpha",
            0.01,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5},
            "share of unchanged features that sampling noise alone may flag: each feature's bounds "
            "are what its day's and the window's rows give by chance this rarely",
        ),
        Knob(
            "min_effect",
            0.2,
            {"type": "number", "exclusiveMinimum": 0},
            "smallest shift that counts: a numeric's mean in reference standard deviations, a "
            "value's share as Cohen's h",
        ),
        Knob(
            "min_rows",
            30,
            {"type": "integer", "minimum": 1},
            "rows the day and the window's earlier days each need before a feature is judged",
        ),
    ),
    "fit_transform": (
        Knob(
            "numeric_scaling",
            "standard",
            {"enum": _SCALINGS},
            "default scaling of numerics: standard, minmax, robust or none (per column: `transform.scaling`)",
        ),
        Knob(
            "numeric_impute",
            "mean",
            {"enum": _IMPUTES},
            "fill for missing numerics: mean or median of the train split (`transform.impute`)",
        ),
        Knob(
            "clip_quantiles",
            None,
            _QUANTILE_PAIR,
            "`[low, high]` clips numerics to the train split's quantiles before scaling "
            "(`transform.clip_quantiles`)",
        ),
        Knob(
            "categorical_encoding",
            "vocab",
            {"enum": _ENCODINGS},
            "`vocab`: ids from a vocabulary fitted on the train split; `hash`: hashed ids "
            "(`transform.encoding`)",
        ),
        Knob(
            "categorical_min_frequency",
            1,
            {"type": "integer", "minimum": 1},
            "train rows a value needs to enter the vocabulary (`transform.min_frequency`)",
        ),
        Knob(
            "categorical_max_vocab",
            10000,
            {"type": "integer", "minimum": 1, "maximum": 1 << 20},
            "vocabulary size cap, most frequent first (`transform.max_vocab`)",
        ),
        Knob(
            "categorical_buckets",
            1024,
            {"type": "integer", "minimum": 2, "maximum": 1 << 24},
            "hashed categorical ids are `1 + xxhash64 mod (buckets - 1)` (`transform.buckets`)",
        ),
        Knob(
            "text_encoding",
            "vocab",
            {"enum": _TEXT_ENCODINGS},
            "token ids from a fitted vocabulary or hashed, or `tokenizer`: subword ids from the "
            "Hugging Face tokenizer file each text column names (`transform.tokenizer`)",
        ),
        Knob(
            "text_min_frequency",
            1,
            {"type": "integer", "minimum": 1},
            "train occurrences a token needs to enter the vocabulary",
        ),
        Knob(
            "text_vocab_size",
            4096,
            {"type": "integer", "minimum": 2, "maximum": 1 << 24},
            "token vocabulary cap (vocab) or hash buckets (hash), ids 0/1 reserved",
        ),
        Knob(
            "text_max_tokens",
            16,
            {"type": "integer", "minimum": 1, "maximum": 4096},
            "text becomes exactly this many ids (truncated or padded; both counted)",
        ),
        Knob(
            "min_variance",
            1e-6,
            {"type": ["number", "null"], "minimum": 0},
            "`VarianceThresholdSelector` on the encoded train numerics: drop those whose sample "
            "variance is <= this (a constant one always; after standard scaling every other has "
            "variance 1); null = off",
        ),
        Knob(
            "selector_mode",
            None,
            {"enum": [None, "numTopFeatures", "percentile", "fpr", "fdr", "fwe"]},
            "`UnivariateFeatureSelector` mode over numerics (ANOVA F, or F-regression) and "
            "categoricals (chi-squared), per feature type; null = off",
        ),
        Knob(
            "selector_threshold",
            None,
            {"type": ["number", "null"], "minimum": 0},
            "the mode's threshold: a count (numTopFeatures), a share (percentile), a p-value "
            "level (fpr, fdr, fwe); null = Spark's default (50, 0.1, 0.05)",
        ),
        Knob(
            "selector_label_type",
            "categorical",
            {"enum": ["categorical", "continuous"]},
            "the label for the univariate tests: classes (ANOVA F, chi-squared) or a continuous "
            "target (F-regression; categoricals are then not tested)",
        ),
        Knob(
            "pca_components",
            None,
            {"type": ["integer", "null"], "minimum": 1, "maximum": 65535},
            "PCA of the kept numerics to this many components `num__pc1..k`, which replace them; null = off",
        ),
        Knob(
            "pca_variance",
            None,
            {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
            "PCA to the fewest components explaining this share of the train variance "
            "(exclusive with `pca_components`); null = off",
        ),
    ),
    "balance": (
        Knob(
            "strategy",
            "none",
            {"enum": ["none", "undersample", "oversample", "reweight"]},
            "train split only, after the transform: `undersample` the larger classes or "
            "`oversample` the smaller ones (exact counts, rows chosen by a hash of id and seed), "
            "or `reweight` the loss (the manifest's `class_weights`; 1.0 otherwise)",
        ),
        Knob(
            "target_ratio",
            1.0,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "smallest / largest class after balancing (whole rows: at least this ratio)",
        ),
        Knob("seed", 0, _SEED, "hash seed of the rows balancing and augmentation choose"),
        Knob(
            "augment",
            "none",
            {"enum": ["none", "smote", "jitter", "text"]},
            "synthetic train rows, made by the loader as it reads (new every epoch): `smote` "
            "interpolates towards a same-class neighbour, `jitter` adds Gaussian noise to "
            "numerics, `text` drops tokens",
        ),
        Knob(
            "synthetic_per_row",
            1,
            {"type": "integer", "minimum": 1, "maximum": 100},
            "synthetic rows made from each train row (a row alone in its smote candidate group "
            "makes none in an encoded export, and is its own copy at read)",
        ),
        Knob(
            "jitter_sigma",
            0.1,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            "standard deviation of the `jitter` noise, in the fitted (scaled) numeric units",
        ),
        Knob(
            "token_dropout",
            0.1,
            {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "probability that `text` augmentation drops each token",
        ),
        Knob(
            "smote_candidates",
            16,
            {"type": "integer", "minimum": 2, "maximum": 1024},
            "rows of a class are hashed into groups of at most this many; `smote` neighbours "
            "come from the row's group, so the cost is linear in the rows",
        ),
    ),
    "export_shards": (
        Knob(
            "batch_size",
            256,
            {"type": "integer", "minimum": 1, "maximum": 1 << 20},
            "the plan's batch size: `steps_per_rank = ceil(rows_per_rank / batch_size)`",
        ),
        Knob(
            "target_shard_mb",
            128,
            {"type": "number", "exclusiveMinimum": 0},
            "target shard size; the shard count is a multiple of the world size",
        ),
        Knob(
            "remainder",
            "drop",
            {"enum": ["drop", "pad"]},
            "`drop` the rows that do not divide by the world size, or `pad` by repeating rows",
        ),
        Knob(
            "shards",
            "prepared",
            {"enum": ["prepared", "encoded"]},
            "`prepared`: the manifest names the sampled days' own files and the trainer applies "
            "the transform as it reads; `encoded`: the features written out as shards of their "
            "own (for readers other than lakeprep's loader; always so with `balance.augment`)",
        ),
    ),
    "training": (
        Knob(
            "backend",
            "local",
            {"enum": TRAINING_BACKENDS},
            "`local`: torchrun on the Airflow worker; `spark`: `TorchDistributor` on the Spark "
            "cluster; `kubernetes`: a Kubeflow Trainer job, `TrainJob` or `PyTorchJob` "
            "(`kubernetes_api`; docs/TRAINING.md)",
            FormField("training_backend", "Training backend", "Training"),
        ),
        Knob(
            "world_size",
            1,
            {"type": "integer", "minimum": 1, "maximum": 1024},
            "ranks the shards are planned for, and the processes launched",
        ),
        Knob(
            "epochs",
            2,
            {"type": "integer", "minimum": 1, "maximum": 1000},
            "training epochs",
            FormField("epochs", "Training epochs", "Training"),
        ),
        Knob(
            "learning_rate",
            1e-3,
            {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
            "Adam learning rate",
        ),
        Knob(
            "seed",
            0,
            _SEED,
            "the trainer's seed: initial weights, each epoch's shuffle of the shards' rows and the "
            "loader's augmentation draws (the sample's seed is `stages.sample.seed`)",
        ),
        Knob(
            "precision",
            "auto",
            {"enum": ["auto", "fp32", "bf16", "fp16"]},
            "`auto`: bf16 autocast on CUDA devices with bf16, else fp16 with a gradient scaler; fp32 "
            "on CPU (docs/GPU.md)",
        ),
        Knob(
            "grad_accumulation_steps",
            1,
            {"type": "integer", "minimum": 1, "maximum": 1024},
            "batches per optimizer step: the effective batch is the export's batch size x this x "
            "the world size",
        ),
        Knob(
            "checkpoint_every_steps",
            100,
            {"type": "integer", "minimum": 0, "maximum": 10_000_000},
            "optimizer steps between checkpoints, besides the one at each epoch end (0: epoch ends "
            "only); a restarted trainer resumes from the last",
        ),
        Knob(
            "max_restarts",
            2,
            {"type": "integer", "minimum": 0, "maximum": 100},
            "`local`, `kubernetes`: times torchrun restarts the ranks after one fails "
            "(`--max-restarts`); each restart resumes from the last checkpoint",
        ),
        Knob(
            "num_processes",
            None,
            {"type": ["integer", "null"], "minimum": 1, "maximum": 1024},
            "`spark`: `TorchDistributor` processes; must equal `world_size` (the shards are planned "
            "for it); null = `world_size`",
        ),
        Knob(
            "local_mode",
            False,
            {"type": "boolean"},
            "`spark`: `true` runs the processes on the driver (the Airflow worker), `false` as "
            "barrier tasks on the executors",
        ),
        Knob(
            "use_gpu",
            False,
            {"type": "boolean"},
            "`spark`: one GPU per process, from Spark's GPU resource scheduling (docs/TRAINING.md)",
        ),
        Knob(
            "image",
            "lakeprep/trainer:latest",
            {"type": "string", "minLength": 1},
            "`kubernetes`: the trainer image (`python -m lakeprep_train.train` and the training code)",
        ),
        Knob(
            "namespace",
            "default",
            {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
            "`kubernetes`: namespace of the training job",
        ),
        Knob(
            "gpus_per_worker",
            1,
            {"type": "integer", "minimum": 0, "maximum": 64},
            "`kubernetes`: `nvidia.com/gpu` limit of each pod, one process per GPU (0: one CPU process)",
        ),
        Knob(
            "workers",
            None,
            {"type": ["integer", "null"], "minimum": 1, "maximum": 1024},
            "`kubernetes`: pods (master included); pods x processes per pod must equal `world_size`; "
            "null = `world_size` / processes per pod",
        ),
        # Where and how the job runs on the cluster, not what it trains: left out of the
        # config hash (a checkpoint resumes on another node pool).
        Knob(
            "kubernetes_api",
            "trainjob",
            {"enum": KUBERNETES_APIS},
            "`kubernetes`: `trainjob`: a Kubeflow Trainer v2 `TrainJob` (trainer.kubeflow.org/v1alpha1, "
            "Trainer >= 2.2) on the `runtime`; `pytorchjob`: a `PyTorchJob` (kubeflow.org/v1) for "
            "clusters with the v1 training operator",
            shapes_data=False,
        ),
        Knob(
            "runtime",
            None,
            {"type": ["string", "null"], "pattern": _DNS_NAME},
            "`kubernetes`, `trainjob`: the `ClusterTrainingRuntime` the TrainJob runs on; null = the "
            "connection's, else `torch-distributed`",
            shapes_data=False,
        ),
        Knob(
            "node_selector",
            None,
            {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            "`kubernetes`: node labels the pods must match (e.g. a GPU node pool); null = the connection's",
            shapes_data=False,
        ),
        Knob(
            "tolerations",
            None,
            {"type": ["array", "null"], "items": _TOLERATION},
            "`kubernetes`: taints the pods tolerate (Kubernetes `Toleration` objects); null = the "
            "connection's",
            shapes_data=False,
        ),
        Knob(
            "poll_seconds",
            30,
            {"type": "integer", "minimum": 1, "maximum": 3600},
            "`kubernetes`: seconds between two reads of the job's status by the triggerer while the "
            "task is deferred",
            shapes_data=False,
        ),
    ),
    "spark": (
        Knob(
            "log_level",
            "WARN",
            {"enum": ["OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"]},
            "Spark's (log4j2 root) level in the stages' task logs; `INFO` brings back Spark's "
            "progress lines; lakeprep's own lines stay at INFO (docs/PIPELINE.md#task-logs)",
            FormField("spark_log_level", "Spark log level", "Spark"),
            shapes_data=False,
        ),
        # Not a form field: it changes the DAG's tasks, which are fixed when the DAG is parsed.
        Knob(
            "fuse_stages",
            False,
            {"type": "boolean"},
            "run the daily stages in one spark-submit (task `prepare_day`) and the window stages in "
            "one task (`fit_and_export`): fewer JVM start-ups for small partitions, the same outputs; "
            "a retry reruns every stage of the task (docs/PIPELINE.md#fused-stages)",
            shapes_data=False,
        ),
    ),
}

# The groups that are stages (spec `stages.<name>`); the others are top-level sections.
STAGE_GROUPS = (
    "validate",
    "preprocess",
    "sample",
    "check_drift",
    "fit_transform",
    "balance",  # applied by export_shards, to the train split only
    "export_shards",
)
TOP_LEVEL_GROUPS = ("window", "training", "spark", "tasks")  # `spark` also has `conf` (lakeprep_airflow.spec)

# Per-column transform overrides (`columns[].transform`): key -> (knob it overrides, roles).
COLUMN_TRANSFORM_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "scaling": ("numeric_scaling", ("numeric",)),
    "impute": ("numeric_impute", ("numeric",)),
    "clip_quantiles": ("clip_quantiles", ("numeric",)),
    "encoding": ("categorical_encoding", ("categorical", "text")),
    "min_frequency": ("categorical_min_frequency", ("categorical", "text")),
    "max_vocab": ("categorical_max_vocab", ("categorical",)),
    "buckets": ("categorical_buckets", ("categorical",)),
    "vocab_size": ("text_vocab_size", ("text",)),
    "max_tokens": ("text_max_tokens", ("text",)),
}


# Per-column transform settings no stage knob has: key -> (schema, roles).
COLUMN_ONLY_KEYS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # The URI of the column's tokenizer.json ({lake} expanded), for `encoding: tokenizer`.
    "tokenizer": ({"type": "string", "minLength": 1}, ("text",)),
    # Or a tokenizer trained on the window's train split (lakeprep_contracts.subword_training).
    "tokenizer_model": ({"enum": ["wordpiece", "bpe"]}, ("text",)),
}


def knob(group: str, name: str) -> Knob:
    for k in KNOBS[group]:
        if k.name == name:
            return k
    raise KeyError(f"no knob {name!r} in {group!r}; known: {[k.name for k in KNOBS[group]]}")


def defaults(group: str) -> dict[str, Any]:
    return {k.name: json.loads(json.dumps(k.default)) for k in KNOBS[group]}


def parse(group: str, params: Mapping[str, Any] | None, *, what: str | None = None) -> dict[str, Any]:
    """A group's knobs from `params`: every knob, defaulted, each value checked against its
    schema. The one place a runtime gets a group's values from (its params dataclass keeps
    the fields and the rules across fields). An unknown name is a TypeError, a value out of
    bounds a ValueError naming the knob and what it allows.
    """
    import jsonschema  # not at import: the DAG processor reads the declarations alone

    given = dict(params or {})
    names = [k.name for k in KNOBS[group]]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(f"unknown {what or group} parameter(s) {unknown}; expected some of {sorted(names)}")
    values = {**defaults(group), **given}
    for k in KNOBS[group]:
        if not jsonschema.Draft202012Validator(k.schema).is_valid(values[k.name]):
            raise ValueError(f"{k.name} {values[k.name]!r} must be {describe_bounds(k.schema)}")
    return values


def group_schema(group: str) -> dict[str, Any]:
    """JSON Schema of one group's section: its knobs, nothing else."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {k.name: k.schema for k in KNOBS[group]},
    }


def column_transform_schema() -> dict[str, Any]:
    """Schema of a column's `transform` overrides, from the knobs they override."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **{
                key: knob("fit_transform", target).schema
                for key, (target, _) in COLUMN_TRANSFORM_KEYS.items()
            },
            # `encoding` is shared by categoricals and texts; only a text takes `tokenizer`
            # (lakeprep_airflow.spec refuses it on a categorical).
            "encoding": {"enum": _TEXT_ENCODINGS},
            **{key: schema for key, (schema, _) in COLUMN_ONLY_KEYS.items()},
        },
    }


def form_knobs() -> list[tuple[str, Knob]]:
    """(spec path, knob) of every knob shown in the trigger form."""
    out = []
    for group, knobs in KNOBS.items():
        prefix = f"stages.{group}" if group in STAGE_GROUPS else group
        out += [(f"{prefix}.{k.name}", k) for k in knobs if k.form]
    return out


def describe_bounds(schema: dict[str, Any]) -> str:
    """`0 < x <= 1`, `one of a, b`: the allowed values in words, for docs and the form."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    low = ("> ", schema["exclusiveMinimum"]) if "exclusiveMinimum" in schema else None
    low = low or ((">= ", schema["minimum"]) if "minimum" in schema else None)
    high = ("< ", schema["exclusiveMaximum"]) if "exclusiveMaximum" in schema else None
    high = high or (("<= ", schema["maximum"]) if "maximum" in schema else None)
    parts = [f"{bound[0]}{bound[1]}" for bound in (low, high) if bound]
    kind = schema.get("type")
    kind = "/".join(kind) if isinstance(kind, list) else kind
    return " and ".join(parts) if parts else (kind or "any")


def markdown_table() -> str:
    """The knob table of docs/SPEC.md."""
    lines = ["| section | knob | default | allowed | meaning |", "|---|---|---|---|---|"]
    for group, knobs in KNOBS.items():
        section = f"stages.{group}" if group in STAGE_GROUPS else group
        for k in knobs:
            form = f" (trigger form: *{k.form.title}*)" if k.form else ""
            lines.append(
                f"| `{section}` | `{k.name}` | `{json.dumps(k.default)}` | "
                f"{describe_bounds(k.schema)} | {k.doc}{form} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
