"""The lake layout and the names of everything written into it, in one place.

    <lake>/<stage>/<dataset>/dt=YYYY-MM-DD/       one partition per stage and date
        part-*.parquet                           the data
        _SUCCESS                                 complete (written last, inside the commit)
        _lakeprep_report.json                    row accounting and decisions
        _stats.json                              per-partition statistics (validate, preprocess)
        _fit_statistics.json                     mergeable fit statistics per split (sample)
        _shards.json                             the day's shard files: rows, sha256 (sample)
        _quarantine/                             rejected rows with their reasons (validate)

Readers of a parent folder skip names starting with `_` or `.` (Spark's partition
discovery does), so staging folders and side files never look like data.
"""

from __future__ import annotations

SUCCESS = "_SUCCESS"
REPORT = "_lakeprep_report.json"
STATS = "_stats.json"
FIT_STATISTICS = "_fit_statistics.json"  # sample: the day's mergeable fit statistics per split
DAY_SHARDS = "_shards.json"  # sample: its files, one split and class each (lakeprep_jobs.day_shards)
QUARANTINE_DIR = "_quarantine"
STAGING_DIR = "_staging"
TRANSFORM = "transform.json"
MANIFEST = "manifest.json"
DRIFT = "drift.json"
SAMPLING = "sampling.json"  # export_shards: class counts through sampling, balancing, augmentation
METRICS = "metrics.json"  # the trainer's model folder: scores, losses, the plan it read
TELEMETRY = "telemetry.json"  # the trainer's step timings and its bound (compute, memory, ...)
MODEL_WEIGHTS = "model.pt"  # the trainer's weights, features and label
MODEL_FILES = (METRICS, TELEMETRY, MODEL_WEIGHTS, TRANSFORM)  # a model folder, tokenizer files aside

# Columns every stage after validate carries, and the prefixes of the encoded features.
ID = "id"
LABEL = "label"
SPLIT = "split"
SYNTHETIC = "is_synthetic"  # true on rows made by augmentation (train split only)
RESERVED_COLUMNS = (ID, LABEL, SPLIT, SYNTHETIC)
PREFIXES = {"numeric": "num__", "categorical": "cat__", "text": "txt__"}
SPLITS = ("train", "validation", "test")
# The raw file a record came from (Spark's `input_file_name()`): in validate's
# quarantine, and a name derived expressions may use (ids of text records).
SOURCE_FILE = "_source_file"

# The lake folders that are not stages.
MODELS = "models"
REPORTS = "reports"


def partition_uri(lake_root: str, stage: str, dataset: str, ds: str) -> str:
    """`<lake>/<stage>/<dataset>/dt=YYYY-MM-DD`: every stage's partition for one date."""
    return f"{lake_root.rstrip('/')}/{stage}/{dataset}/dt={ds}"


def join(uri: str, name: str) -> str:
    return f"{uri.rstrip('/')}/{name}"


def encoded_name(role: str, column: str) -> str:
    """The shard column of a feature: `num__distance`, `cat__carrier`, `txt__plane_model`."""
    return PREFIXES[role] + column


def role_of(encoded: str) -> str | None:
    """The role of an encoded shard column from its prefix, or None for id/label."""
    for role, prefix in PREFIXES.items():
        if encoded.startswith(prefix):
            return role
    return None
