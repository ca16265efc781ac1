"""Load, validate and verify a training manifest (docs/MANIFEST.md, format version 1).

The manifest is the trainer's only input. Loading checks its structure and the
exporter's promises that training relies on (a shard count that is a multiple of the
world size, ``rows == world_size * rows_per_rank``, shard ``i`` on rank
``i % world_size``), so a bad manifest fails here, naming the field, instead of as
a hung collective later. :func:`verify_shards` then checks the shard files themselves.

    python -m lakeprep_train.manifest check <manifest.json | file:///.../manifest.json>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakeprep_train import storage

FORMAT_VERSION = 1
ROLES = ("numeric", "categorical", "text")
REMAINDERS = ("drop", "pad")
RESERVED_COLUMNS = ("id", "label")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


class ManifestError(ValueError):
    """A manifest that the trainer cannot use; lists every problem found, by field."""

    def __init__(self, location: str, problems: Sequence[str]) -> None:
        self.location = location
        self.problems = list(problems)
        listed = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid manifest {location}:\n{listed}")


@dataclass(frozen=True)
class Feature:
    """One model input column: ``role`` decides its tensor, ``shape`` its width."""

    name: str
    role: str
    dtype: str
    shape: tuple[int, ...]
    cardinality: int | None = None  # categorical: ids in [0, cardinality), 0 = missing
    vocab_size: int | None = None  # text: ids in [0, vocab_size), 0 = padding

    @property
    def length(self) -> int:
        """Tokens per row of a text feature."""
        return self.shape[0] if self.shape else 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "role": self.role,
            "dtype": self.dtype,
            "shape": list(self.shape),
        }
        if self.cardinality is not None:
            out["cardinality"] = self.cardinality
        if self.vocab_size is not None:
            out["vocab_size"] = self.vocab_size
        return out


@dataclass(frozen=True)
class Label:
    name: str
    classes: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """How a split is spread over ranks: equal rows and steps on every rank."""

    world_size: int
    batch_size: int
    rows_per_rank: int
    steps_per_rank: int
    remainder: str


@dataclass(frozen=True)
class Shard:
    path: str  # as written in the manifest, relative to its folder
    location: str  # resolved against the manifest's folder; what storage opens
    rank: int
    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Split:
    name: str
    rows: int
    rows_available: int | None
    class_counts: dict[str, int]
    plan: Plan
    shards: tuple[Shard, ...]

    def shards_for_rank(self, rank: int) -> tuple[Shard, ...]:
        return tuple(s for s in self.shards if s.rank == rank)


@dataclass(frozen=True)
class Manifest:
    location: str
    format_version: int
    dataset: str
    logical_date: str | None
    run_id: str | None
    config_hash: str | None
    label: Label
    features: tuple[Feature, ...]
    splits: dict[str, Split]
    class_weights: dict[str, float] | None

    def features_with_role(self, role: str) -> tuple[Feature, ...]:
        return tuple(f for f in self.features if f.role == role)

    def split(self, name: str) -> Split:
        try:
            return self.splits[name]
        except KeyError:
            raise ManifestError(
                self.location,
                [f"splits.{name}: split is missing; the manifest has {sorted(self.splits)}"],
            ) from None


def load_manifest(location: str) -> Manifest:
    """Read and validate the manifest at ``location`` (local path or URI).

    :raises ManifestError: naming the manifest and each bad field.
    """
    try:
        with storage.open_input(location) as f:
            raw = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as err:
        raise ManifestError(location, [f"cannot read the manifest: {err}"]) from err
    return parse_manifest(raw, location)


def parse_manifest(raw: Any, location: str) -> Manifest:
    """Validate a decoded manifest; ``location`` resolves shard paths and names errors."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise ManifestError(location, [f"top level: expected a JSON object, got {_kind(raw)}"])
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        # Nothing else can be trusted to mean what this reader thinks it means.
        raise ManifestError(
            location,
            [f"format_version: expected {FORMAT_VERSION}, got {version!r}"],
        )
    dataset = _field(raw, "dataset", str, problems, "")
    label = _parse_label(raw.get("label"), problems)
    features = _parse_features(raw.get("features"), problems)
    folder = storage.parent_of(location)
    splits: dict[str, Split] = {}
    raw_splits = raw.get("splits")
    if not isinstance(raw_splits, dict) or not raw_splits:
        problems.append(f"splits: expected a non-empty object of splits, got {_kind(raw_splits)}")
    else:
        for name, raw_split in raw_splits.items():
            split = _parse_split(name, raw_split, folder, problems)
            if split is not None:
                splits[name] = split
        if "train" not in raw_splits:
            problems.append(f"splits.train: split is missing; the manifest has {sorted(raw_splits)}")
    class_weights = _parse_class_weights(raw.get("class_weights"), label, problems)
    if label is not None and features and any(f.name == label.name for f in features):
        problems.append(f"features: {label.name!r} is the label (label.name), not a feature")
    if problems:
        raise ManifestError(location, problems)
    assert label is not None and features is not None
    return Manifest(
        location=location,
        format_version=version,
        dataset=dataset,
        logical_date=raw.get("logical_date"),
        run_id=raw.get("run_id"),
        config_hash=raw.get("config_hash"),
        label=label,
        features=features,
        splits=splits,
        class_weights=class_weights,
    )


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(obj: dict, key: str, kind: type, problems: list[str], where: str, default=None):
    value = obj.get(key)
    path = f"{where}.{key}" if where else key
    if kind is int:
        ok = _is_int(value) and value >= 0
        expected = "a non-negative integer"
    else:
        ok = isinstance(value, kind) and bool(value)
        expected = f"a non-empty {kind.__name__}"
    if not ok:
        problems.append(f"{path}: expected {expected}, got {_kind(value)}")
        return default
    return value


def _parse_label(raw: Any, problems: list[str]) -> Label | None:
    if not isinstance(raw, dict):
        problems.append(f"label: expected an object with name and classes, got {_kind(raw)}")
        return None
    name = _field(raw, "name", str, problems, "label")
    classes = raw.get("classes")
    if (
        not isinstance(classes, list)
        or len(classes) < 2
        or not all(_is_int(c) for c in classes)
        or len(set(classes)) != len(classes)
    ):
        problems.append(f"label.classes: expected at least 2 distinct integers, got {_kind(classes)}")
        return None
    return Label(name=name, classes=tuple(classes)) if name else None


def _parse_features(raw: Any, problems: list[str]) -> tuple[Feature, ...] | None:
    if not isinstance(raw, list) or not raw:
        problems.append(f"features: expected a non-empty list, got {_kind(raw)}")
        return None
    features: list[Feature] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"features[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: expected an object, got {_kind(item)}")
            continue
        n_before = len(problems)
        name = _field(item, "name", str, problems, where)
        if name:
            where = f"features[{i}] ({name})"
            if name in seen or name in RESERVED_COLUMNS:
                problems.append(f"{where}.name: duplicate or reserved column name {name!r}")
            seen.add(name)
        role = item.get("role")
        if role not in ROLES:
            problems.append(f"{where}.role: expected one of {list(ROLES)}, got {role!r}")
        dtype = _field(item, "dtype", str, problems, where)
        shape = item.get("shape", [])
        if not isinstance(shape, list) or not all(_is_int(d) and d > 0 for d in shape):
            problems.append(f"{where}.shape: expected a list of positive integers, got {shape!r}")
            shape = []
        cardinality = vocab_size = None
        if role == "categorical":
            cardinality = item.get("cardinality")
            if not _is_int(cardinality) or cardinality < 1:
                problems.append(f"{where}.cardinality: expected a positive integer, got {cardinality!r}")
            if shape:
                problems.append(f"{where}.shape: a categorical feature is a scalar ([]), got {shape!r}")
        elif role == "text":
            vocab_size = item.get("vocab_size")
            if not _is_int(vocab_size) or vocab_size < 1:
                problems.append(f"{where}.vocab_size: expected a positive integer, got {vocab_size!r}")
            if len(shape) != 1:
                problems.append(f"{where}.shape: a text feature has shape [length], got {shape!r}")
        elif role == "numeric" and shape:
            problems.append(f"{where}.shape: a numeric feature is a scalar ([]), got {shape!r}")
        if len(problems) == n_before:
            features.append(Feature(name, role, dtype, tuple(shape), cardinality, vocab_size))
    return tuple(features)


def _parse_split(name: str, raw: Any, folder: str, problems: list[str]) -> Split | None:
    where = f"splits.{name}"
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected an object, got {_kind(raw)}")
        return None
    n_before = len(problems)
    rows = _field(raw, "rows", int, problems, where)
    rows_available = raw.get("rows_available")
    if rows_available is not None and not (_is_int(rows_available) and rows_available >= 0):
        problems.append(
            f"{where}.rows_available: expected a non-negative integer, got {_kind(rows_available)}"
        )
        rows_available = None
    class_counts = raw.get("class_counts", {})
    if not isinstance(class_counts, dict) or not all(_is_int(v) and v >= 0 for v in class_counts.values()):
        problems.append(
            f"{where}.class_counts: expected an object of class -> count, got {_kind(class_counts)}"
        )
        class_counts = {}
    plan = _parse_plan(raw.get("plan"), f"{where}.plan", problems)
    if plan is not None and rows is not None:
        if rows != plan.world_size * plan.rows_per_rank:
            problems.append(
                f"{where}.rows: {rows} != plan.world_size * plan.rows_per_rank "
                f"= {plan.world_size} * {plan.rows_per_rank} = {plan.world_size * plan.rows_per_rank}"
            )
        if rows_available is not None:
            if plan.remainder == "drop" and rows > rows_available:
                problems.append(
                    f"{where}.rows: {rows} rows exceed rows_available {rows_available} with remainder 'drop'"
                )
            if plan.remainder == "pad" and rows < rows_available:
                problems.append(
                    f"{where}.rows: {rows} rows are fewer than rows_available {rows_available} "
                    "with remainder 'pad'"
                )
    shards = _parse_shards(raw.get("shards"), where, folder, plan, problems)
    if len(problems) > n_before or plan is None or shards is None:
        return None
    return Split(name, rows, rows_available, dict(class_counts), plan, shards)


def _parse_plan(raw: Any, where: str, problems: list[str]) -> Plan | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected an object, got {_kind(raw)}")
        return None
    n_before = len(problems)
    world_size = _field(raw, "world_size", int, problems, where)
    batch_size = _field(raw, "batch_size", int, problems, where)
    for key, value in (("world_size", world_size), ("batch_size", batch_size)):
        if value == 0:
            problems.append(f"{where}.{key}: expected a positive integer, got 0")
    rows_per_rank = _field(raw, "rows_per_rank", int, problems, where)
    steps_per_rank = _field(raw, "steps_per_rank", int, problems, where)
    remainder = raw.get("remainder")
    if remainder not in REMAINDERS:
        problems.append(f"{where}.remainder: expected one of {list(REMAINDERS)}, got {remainder!r}")
    if len(problems) > n_before:
        return None
    expected_steps = math.ceil(rows_per_rank / batch_size)
    if steps_per_rank != expected_steps:
        problems.append(
            f"{where}.steps_per_rank: {steps_per_rank} != ceil(rows_per_rank / batch_size) "
            f"= ceil({rows_per_rank} / {batch_size}) = {expected_steps}"
        )
        return None
    return Plan(world_size, batch_size, rows_per_rank, steps_per_rank, remainder)


def _parse_shards(
    raw: Any, where: str, folder: str, plan: Plan | None, problems: list[str]
) -> tuple[Shard, ...] | None:
    # An empty split (rows 0, e.g. a test split of a tiny window) has no shards; any other
    # split needs some.
    empty_ok = plan is not None and plan.rows_per_rank == 0
    if not isinstance(raw, list) or (not raw and not empty_ok):
        problems.append(f"{where}.shards: expected a non-empty list, got {_kind(raw)}")
        return None
    n_before = len(problems)
    shards: list[Shard] = []
    for i, item in enumerate(raw):
        at = f"{where}.shards[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{at}: expected an object, got {_kind(item)}")
            continue
        path = _field(item, "path", str, problems, at)
        if path and ("://" in path or path.startswith("/") or ".." in path.split("/")):
            # The contract says relative to the manifest's folder; refusing anything
            # else keeps a manifest from pointing the trainer outside its partition.
            problems.append(f"{at}.path: expected a path relative to the manifest's folder, got {path!r}")
            path = None
        rank = _field(item, "rank", int, problems, at)
        rows = _field(item, "rows", int, problems, at)
        size = _field(item, "bytes", int, problems, at)
        sha = item.get("sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            problems.append(f"{at}.sha256: expected 64 lowercase hex digits, got {_kind(sha)}")
        if plan is not None and rank is not None and rank != i % plan.world_size:
            problems.append(
                f"{at}.rank: shard {i} belongs to rank {i} % world_size {plan.world_size} "
                f"= {i % plan.world_size}, got {rank}"
            )
        if path and rank is not None and rows is not None and size is not None:
            shards.append(Shard(path, storage.join(folder, path), rank, rows, size, sha))
    if plan is not None and len(raw) % plan.world_size != 0:
        problems.append(
            f"{where}.shards: {len(raw)} shards is not a multiple of plan.world_size "
            f"{plan.world_size}, so ranks cannot hold equal shares"
        )
    if len(problems) > n_before:
        return None
    if plan is not None:
        for rank in range(plan.world_size):
            held = sum(s.rows for s in shards if s.rank == rank)
            if held != plan.rows_per_rank:
                problems.append(
                    f"{where}.shards: rank {rank} holds {held} rows, "
                    f"plan.rows_per_rank is {plan.rows_per_rank}"
                )
    return tuple(shards) if len(problems) == n_before else None


def _parse_class_weights(raw: Any, label: Label | None, problems: list[str]) -> dict[str, float] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)
        for v in raw.values()
    ):
        problems.append(f"class_weights: expected an object of class -> positive weight, got {_kind(raw)}")
        return None
    if label is not None:
        expected = {str(c) for c in label.classes}
        if set(raw) != expected:
            problems.append(
                f"class_weights: keys {sorted(raw)} do not match label.classes {sorted(expected)}"
            )
            return None
    return {k: float(v) for k, v in raw.items()}


def shard_schema(manifest: Manifest) -> dict[str, str]:
    """Column -> the kind of Arrow type the contract promises for it."""
    columns = {"id": "string", manifest.label.name: "integer"}
    for f in manifest.features:
        columns[f.name] = {"numeric": "floating", "categorical": "integer", "text": "list"}[f.role]
    return columns


def _type_matches(kind: str, arrow_type: pa.DataType) -> bool:
    if kind == "string":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if kind == "integer":
        return pa.types.is_integer(arrow_type)
    if kind == "floating":
        return pa.types.is_floating(arrow_type)
    return (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ) and pa.types.is_integer(arrow_type.value_type)


def verify_shards(manifest: Manifest) -> list[str]:
    """Check every shard's bytes, sha256, Parquet row count and columns against the manifest.

    Reads each shard once in full (for the checksum). Returns human-readable problems,
    each naming the split, shard path and field; an empty list means the shards are
    what the manifest says.
    """
    problems: list[str] = []
    expected_columns = shard_schema(manifest)
    for split in manifest.splits.values():
        for i, shard in enumerate(split.shards):
            at = f"splits.{split.name}.shards[{i}] ({shard.path})"
            try:
                with storage.open_input(shard.location) as f:
                    size = f.size()
                    digest = hashlib.sha256()
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
            except OSError as err:
                problems.append(f"{at}: cannot read {shard.location}: {err}")
                continue
            if size != shard.bytes:
                problems.append(f"{at}.bytes: manifest says {shard.bytes}, file has {size}")
            if digest.hexdigest() != shard.sha256:
                problems.append(f"{at}.sha256: manifest says {shard.sha256}, file has {digest.hexdigest()}")
            try:
                with storage.open_input(shard.location) as f:
                    metadata = pq.ParquetFile(f).metadata
                    schema = metadata.schema.to_arrow_schema()
            except (OSError, pa.ArrowException) as err:
                problems.append(f"{at}: not a readable Parquet file: {err}")
                continue
            if metadata.num_rows != shard.rows:
                problems.append(
                    f"{at}.rows: manifest says {shard.rows}, Parquet footer says {metadata.num_rows}"
                )
            for column, kind in expected_columns.items():
                index = schema.get_field_index(column)
                if index < 0:
                    problems.append(f"{at}: column {column!r} is missing")
                elif not _type_matches(kind, schema.field(index).type):
                    problems.append(
                        f"{at}: column {column!r} has type {schema.field(index).type}, expected {kind}"
                    )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``check <manifest>``: validate the structure, then verify every shard."""
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_train.manifest",
        description="Check a lakeprep training manifest against its shards.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="validate the manifest and verify every shard")
    check.add_argument("manifest", help="path or URI of manifest.json")
    args = parser.parse_args(argv)

    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as err:
        print(err, file=sys.stderr)
        return 1
    problems = verify_shards(manifest)
    if problems:
        print(f"{args.manifest}: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    n_shards = sum(len(s.shards) for s in manifest.splits.values())
    summary = ", ".join(
        f"{s.name} {s.rows} rows on {s.plan.world_size} rank(s)" for s in manifest.splits.values()
    )
    print(f"{args.manifest}: ok, {n_shards} shards verified ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
