"""Load, validate and verify a training manifest (docs/MANIFEST.md, format version 1).

The manifest is the trainer's only input. Loading checks it in two passes, so a bad
manifest fails here, naming every bad field, instead of as a hung collective later:

1. its structure, against `lakeprep_contracts/schemas/manifest.schema.json`, the file
   the exporter checks what it writes against;
2. the exporter's promises that a schema cannot express: the split's ``plan`` for the
   spec's world size (shard ``i`` on rank ``i % world_size``, ``rows == world_size *
   rows_per_rank``, ``steps_per_rank == ceil(rows_per_rank / batch_size)``, equal rows
   on every rank), class counts and weights per ``label.classes``, the window's days.

The trainer itself no longer needs that plan's world size: it plans each rank's rows
at read time from the shards' row counts for whatever world size it runs with
(``lakeprep_train.dataset.plan_rank``). The plan stays as a checked statement of how
the export was sized, and for readers that still use it.

:func:`verify_shards` then checks the shard files themselves.

    python -m lakeprep_train.manifest check <manifest.json | file:///.../manifest.json>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakeprep_contracts import documents, pipeline
from lakeprep_contracts.records import FEATURE_ROLES
from lakeprep_train import storage

FORMAT_VERSION = 1
RESERVED_COLUMNS = ("id", "label")
WINDOW_OUTCOMES = pipeline.WINDOW_OUTCOMES
_CHUNK = 1 << 20


class ManifestError(documents.DocumentError):
    """A manifest that the trainer cannot use; lists every problem found, by field."""

    def __init__(self, location: str, problems: Sequence[str]) -> None:
        super().__init__("manifest", location, problems)
        self.location = location


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
    """One entry of a split's ``shards``: rows ``[offset, offset + rows)`` of one file.

    Several entries may name the same file (a class oversampled repeats its rows; an
    undersampled one takes a prefix of a file sorted by the sampling hash).
    """

    path: str  # as written in the manifest, relative to its folder
    location: str  # resolved against the manifest's folder; what storage opens
    rank: int
    rows: int
    bytes: int  # of the file
    sha256: str  # of the file
    offset: int = 0  # the entry's first row in the file
    # The file's exact row count: ``file_rows`` as recorded; ``rows`` for an entry with
    # neither ``offset`` nor ``file_rows`` (the whole file); None for a slice without it.
    file_rows: int | None = None
    # k >= 1: the rows are read as their k-th synthetic copy, augmented by the loader
    # (``Manifest.augmentation``); 0: the rows themselves.
    synthetic: int = 0

    def file_rows_problem(self, found: int) -> str | None:
        """Why a file of ``found`` rows cannot hold this entry (None: it can)."""
        if self.file_rows is not None and found != self.file_rows:
            field = "rows" if self.file_rows == self.rows and not self.offset else "file_rows"
            return f"has {found} rows, the manifest's {field} says {self.file_rows}"
        if found < self.offset + self.rows:
            return (
                f"has {found} rows, but the entry reads rows [{self.offset}, {self.offset + self.rows}) "
                f"(offset {self.offset} + rows {self.rows}): past the file's end"
            )
        return None


@dataclass(frozen=True)
class Split:
    name: str
    rows: int
    rows_available: int | None
    class_counts: dict[str, int]
    plan: Plan
    shards: tuple[Shard, ...]
    # Train: rows per class as sampled, before balancing and augmentation (None in a
    # manifest written before balancing existed; `class_counts` is natural then).
    class_counts_natural: dict[str, int] | None = None

    @property
    def natural_class_counts(self) -> dict[str, int]:
        """Rows per class as sampled: what the real distribution of this split looks like."""
        return dict(self.class_counts_natural if self.class_counts_natural is not None else self.class_counts)

    def shards_for_rank(self, rank: int) -> tuple[Shard, ...]:
        return tuple(s for s in self.shards if s.rank == rank)


@dataclass(frozen=True)
class TransformRef:
    """The fitted transform the shards were made with (docs/TRANSFORM.md)."""

    uri: str  # as written: a URI, or a path relative to the manifest's folder
    location: str  # resolved against the manifest's folder; what storage opens
    sha256: str


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
    transform: TransformRef | None = None
    shard_columns: str = "encoded"
    # The transform's document, once read and checked (:func:`with_transform_document`):
    # what the loader encodes "prepared" shards with.
    transform_document: Mapping[str, Any] | None = None
    # The manifest's ``balance`` (``augment``, ``jitter_sigma``, ``token_dropout``): how the
    # loader augments the rows of ``synthetic`` entries; None in a manifest without it.
    balance: Mapping[str, Any] | None = None

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
    """Validate a decoded manifest; ``location`` resolves shard paths and names errors.

    The structure is checked first and every structural problem is listed; the rules
    below run only on a well-formed manifest (they index into it freely).
    """
    if not isinstance(raw, dict):
        raise ManifestError(location, [f"<top level>: expected a JSON object, got {_kind(raw)}"])
    version = raw.get("format_version")
    if not _is_int(version) or version != FORMAT_VERSION:
        # Nothing else can be trusted to mean what this reader thinks it means.
        raise ManifestError(location, [f"format_version: expected {FORMAT_VERSION}, got {version!r}"])
    problems = documents.problems("manifest", raw) or rule_problems(raw)
    if problems:
        raise ManifestError(location, problems)
    return _build(raw, location)


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:80]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def rule_problems(raw: dict[str, Any]) -> list[str]:
    """The exporter's promises that the schema cannot express, on a schema-valid manifest.

    Returns one line per broken rule, prefixed by the field's JSON path.
    """
    problems: list[str] = []
    classes = [str(c) for c in raw["label"]["classes"]]
    seen: set[str] = set()
    for i, feature in enumerate(raw["features"]):
        name = feature["name"]
        if name in seen:
            problems.append(f"features[{i}].name: {name!r} is already the name of an earlier feature")
        if name == raw["label"]["name"]:
            problems.append(f"features[{i}].name: {name!r} is the label (label.name), not a feature")
        seen.add(name)
    for name, split in raw["splits"].items():
        problems += _split_problems(
            f"splits.{name}", split, classes, contiguous=raw.get("shard_columns", "encoded") == "prepared"
        )
    weights = raw["class_weights"]
    if sorted(weights) != sorted(classes):
        problems.append(f"class_weights: keys {sorted(weights)} do not match label.classes {sorted(classes)}")
    problems += [
        f"class_weights.{c}: expected a finite weight, got {w!r}"
        for c, w in weights.items()
        if not math.isfinite(w)
    ]
    problems += _window_problems(raw)
    problems += _synthetic_problems(raw)
    if raw.get("shard_columns", "encoded") == "prepared" and not raw.get("transform"):
        problems.append(
            "transform: required when shard_columns is 'prepared': the shards hold prepared rows, "
            "which the trainer encodes with this transform (write its uri and sha256)"
        )
    return problems


def _split_problems(
    where: str, split: dict[str, Any], classes: list[str], *, contiguous: bool = False
) -> list[str]:
    """The rules of one split. Encoded shards are dealt to ranks by position (shard `i` on
    rank `i % world_size`, `shards_per_rank` each); the entries of a prepared export
    (`contiguous`) are slices cut at the ranks' boundaries, rank by rank, so a rank's
    entries are consecutive and `shards_per_rank` is the most any rank holds."""
    problems: list[str] = []
    plan, rows, available = split["plan"], split["rows"], split["rows_available"]
    w, per_rank, batch = plan["world_size"], plan["rows_per_rank"], plan["batch_size"]
    if rows != w * per_rank:
        problems.append(
            f"{where}.rows: {rows} != plan.world_size * plan.rows_per_rank "
            f"= {w} * {per_rank} = {w * per_rank}"
        )
    steps = math.ceil(per_rank / batch)
    if plan["steps_per_rank"] != steps:
        problems.append(
            f"{where}.plan.steps_per_rank: {plan['steps_per_rank']} != ceil(rows_per_rank / batch_size) "
            f"= ceil({per_rank} / {batch}) = {steps}"
        )
    if plan["remainder"] == "drop" and rows > available:
        problems.append(f"{where}.rows: {rows} rows exceed rows_available {available} with remainder 'drop'")
    if plan["remainder"] == "pad" and rows < available:
        problems.append(
            f"{where}.rows: {rows} rows are fewer than rows_available {available} with remainder 'pad'"
        )
    counts = split["class_counts"]
    if sorted(counts) != sorted(classes):
        problems.append(
            f"{where}.class_counts: keys {sorted(counts)} do not match label.classes {sorted(classes)}"
        )
    elif sum(counts.values()) != available:
        problems.append(
            f"{where}.class_counts: they sum to {sum(counts.values())}, rows_available is {available}"
        )
    natural = split.get("class_counts_natural")
    if natural is not None and sorted(natural) != sorted(classes):
        problems.append(
            f"{where}.class_counts_natural: keys {sorted(natural)} do not match "
            f"label.classes {sorted(classes)}"
        )

    shards = split["shards"]
    n_before = len(problems)
    if contiguous:
        ranks = [s["rank"] for s in shards]
        held = max((ranks.count(r) for r in range(w)), default=0)
        if any(r >= w for r in ranks) or ranks != sorted(ranks):
            problems.append(
                f"{where}.shards: ranks {ranks[:20]}{'...' if len(ranks) > 20 else ''} must run from 0 "
                f"to world_size - 1 = {w - 1}, each rank's entries together (shard_columns 'prepared')"
            )
        elif plan["shards_per_rank"] != held:
            problems.append(
                f"{where}.plan.shards_per_rank: {plan['shards_per_rank']}, "
                f"but a rank holds up to {held} entries"
            )
    elif len(shards) % w:
        problems.append(
            f"{where}.shards: {len(shards)} shards is not a multiple of plan.world_size "
            f"{w}, so ranks cannot hold equal shares"
        )
    elif len(shards) != w * plan["shards_per_rank"]:
        problems.append(
            f"{where}.shards: {len(shards)} shards != plan.world_size * plan.shards_per_rank "
            f"= {w} * {plan['shards_per_rank']}"
        )
    files: dict[str, tuple[int, dict[str, Any]]] = {}  # path -> its first entry
    for i, shard in enumerate(shards):
        if not contiguous and shard["rank"] != i % w:
            problems.append(
                f"{where}.shards[{i}].rank: shard {i} belongs to rank {i} % world_size {w} "
                f"= {i % w}, got {shard['rank']}"
            )
        file_rows = shard.get("file_rows")
        end = shard.get("offset", 0) + shard["rows"]
        if file_rows is not None and end > file_rows:
            problems.append(
                f"{where}.shards[{i}]: offset {shard.get('offset', 0)} + rows {shard['rows']} = {end} "
                f"is past the file's end (file_rows {file_rows})"
            )
        # Entries may share a file (slices of it); they must describe the same file.
        first, entry = files.setdefault(shard["path"], (i, shard))
        for key in ("bytes", "sha256", "file_rows"):
            if key in entry and key in shard and entry[key] != shard[key]:
                problems.append(
                    f"{where}.shards[{i}].{key}: {shard.get(key)!r}, but shards[{first}] names the same "
                    f"file {shard['path']!r} with {entry.get(key)!r}"
                )
    if len(problems) == n_before:  # per-rank sums only mean something with the right ranks
        for rank in range(w):
            held = sum(s["rows"] for s in shards if s["rank"] == rank)
            if held != per_rank:
                problems.append(
                    f"{where}.shards: rank {rank} holds {held} rows, plan.rows_per_rank is {per_rank}"
                )
    return problems


# What the loader needs to make a synthetic row, per read-time augmentation.
READ_TIME_AUGMENTS = {"jitter": "jitter_sigma", "text": "token_dropout", "smote": "smote_candidates"}


def _synthetic_problems(raw: dict[str, Any]) -> list[str]:
    """Entries read as synthetic copies: train only (evaluation sees real rows), prepared
    shards, and an augmentation the loader can make, with its parameter."""
    marked = {
        name: [i for i, x in enumerate(split["shards"]) if x.get("synthetic")]
        for name, split in raw["splits"].items()
    }
    if not any(marked.values()):
        return []
    problems = [
        f"splits.{name}.shards[{found[0]}].synthetic: only the train split may hold synthetic rows; "
        "validation and test keep the sampled rows"
        for name, found in marked.items()
        if found and name != "train"
    ]
    balance = raw.get("balance") or {}
    needed = READ_TIME_AUGMENTS.get(balance.get("augment", "none"))
    if raw.get("shard_columns", "encoded") != "prepared":
        problems.append(
            "shard_columns: synthetic entries are augmented at read, which needs 'prepared' shards"
        )
    if needed is None:
        problems.append(
            f"balance.augment: {balance.get('augment', 'none')!r}, but entries are marked synthetic; "
            f"the loader augments with one of {sorted(READ_TIME_AUGMENTS)}"
        )
    elif needed not in balance:
        problems.append(f"balance.{needed}: required to augment synthetic entries ({balance['augment']})")
    return problems


def _window_problems(raw: dict[str, Any]) -> list[str]:
    """Every day of the window has exactly one outcome; the days run oldest first."""
    window = raw["window"]
    days = window["days"]
    problems: list[str] = []
    if days != sorted(days):
        problems.append(f"window.days: {days} must run oldest first")
    if "window_days" in raw and raw["window_days"] != len(days):
        problems.append(f"window_days: {raw['window_days']} != the {len(days)} days of window.days")
    owner: dict[str, str] = {}
    for outcome in WINDOW_OUTCOMES:
        for day in window[outcome]:
            if day not in days:
                problems.append(f"window.{outcome}: {day} is not one of window.days")
            elif day in owner:
                problems.append(f"window.{outcome}: {day} is also in window.{owner[day]}")
            else:
                owner[day] = outcome
    unaccounted = [d for d in days if d not in owner]
    if unaccounted:
        problems.append(f"window.days: {unaccounted} are in none of {', '.join(WINDOW_OUTCOMES)}")
    return problems


def _resolve(folder: str, reference: str) -> str:
    """A URI or absolute path as is; a relative path under the manifest's folder."""
    if "://" in reference or reference.startswith("/"):
        return reference
    return storage.join(folder, reference)


def _build(raw: dict[str, Any], location: str) -> Manifest:
    """The dataclasses of a manifest that passed the schema and the rules."""
    folder = storage.parent_of(location)
    features = tuple(
        Feature(
            f["name"], f["role"], f["dtype"], tuple(f["shape"]), f.get("cardinality"), f.get("vocab_size")
        )
        for f in raw["features"]
    )
    splits = {}
    for name, s in raw["splits"].items():
        p = s["plan"]
        plan = Plan(p["world_size"], p["batch_size"], p["rows_per_rank"], p["steps_per_rank"], p["remainder"])
        shards = tuple(
            Shard(
                x["path"],
                storage.join(folder, x["path"]),
                x["rank"],
                x["rows"],
                x["bytes"],
                x["sha256"],
                x.get("offset", 0),
                x.get("file_rows", None if "offset" in x else x["rows"]),
                x.get("synthetic", 0),
            )
            for x in s["shards"]
        )
        natural = s.get("class_counts_natural")
        splits[name] = Split(
            name,
            s["rows"],
            s["rows_available"],
            dict(s["class_counts"]),
            plan,
            shards,
            dict(natural) if natural is not None else None,
        )
    transform = raw.get("transform")
    return Manifest(
        location=location,
        format_version=raw["format_version"],
        dataset=raw["dataset"],
        logical_date=raw["logical_date"],
        run_id=raw["run_id"],
        config_hash=raw["config_hash"],
        label=Label(raw["label"]["name"], tuple(raw["label"]["classes"])),
        features=features,
        splits=splits,
        class_weights={k: float(v) for k, v in raw["class_weights"].items()},
        transform=(
            TransformRef(transform["uri"], _resolve(folder, transform["uri"]), transform["sha256"])
            if transform
            else None
        ),
        shard_columns=raw.get("shard_columns", "encoded"),
        balance=raw.get("balance"),
    )


def read_transform_bytes(manifest: Manifest) -> bytes:
    """The bytes of the manifest's transform, checked against its sha256.

    :raises ManifestError: naming ``transform`` when there is none, the file cannot be
        read, or its sha256 differs.
    """
    ref = manifest.transform
    if ref is None:
        raise ManifestError(manifest.location, ["transform: the manifest has none"])
    try:
        with storage.open_input(ref.location) as f:
            data = f.read()
    except (OSError, ValueError) as err:
        raise ManifestError(
            manifest.location, [f"transform.uri {ref.uri!r}: cannot read {ref.location}: {err}"]
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise ManifestError(
            manifest.location, [f"transform.sha256 is {ref.sha256}, but {ref.location} has sha256 {digest}"]
        )
    return data


def with_transform_document(manifest: Manifest, data: bytes | None = None) -> Manifest:
    """``manifest`` carrying its transform's document, which "prepared" shards are encoded with.

    ``data``: the transform's bytes, already checked against ``transform.sha256`` (as
    the trainer reads them); read and checked here when None. The document is checked
    (``lakeprep_train.transform.check_document``) and must produce every feature the
    manifest lists, with the same role and width.

    :raises ManifestError: naming the transform and what is wrong with it.
    """
    from lakeprep_train.transform import check_document, load_tokenizers

    if data is None:
        data = read_transform_bytes(manifest)
    where = manifest.transform.location if manifest.transform else "transform"
    try:
        doc = check_document(json.loads(data.decode("utf-8")), where)
    except (UnicodeDecodeError, ValueError) as err:  # TransformError and JSONDecodeError too
        raise ManifestError(manifest.location, [f"transform.uri: {err}"]) from err
    problems = _document_problems(manifest, doc)
    if problems:
        raise ManifestError(manifest.location, problems)
    try:
        doc = load_tokenizers(doc, where)
    except ValueError as err:  # TransformError: a tokenizer file missing or changed
        raise ManifestError(manifest.location, [f"transform.uri: {err}"]) from err
    return replace(manifest, transform_document=doc)


def _document_problems(manifest: Manifest, doc: Mapping[str, Any]) -> list[str]:
    """Each manifest feature is an output of ``doc`` with the manifest's role and width."""
    specs = {spec["output"]: (role, spec) for role in FEATURE_ROLES for spec in doc[role]}
    problems = []
    for i, f in enumerate(manifest.features):
        if f.name not in specs:
            problems.append(
                f"features[{i}].name: {f.name!r} is not an output of the transform {sorted(specs)}"
            )
            continue
        role, spec = specs[f.name]
        if role != f.role:
            problems.append(f"features[{i}].role: {f.role!r}, the transform makes {f.name!r} a {role}")
        elif role == "text" and f.length != int(spec["max_tokens"]):
            problems.append(
                f"features[{i}].shape: {list(f.shape)}, the transform keeps max_tokens {spec['max_tokens']}"
            )
    return problems


def transform_for_features(manifest: Manifest, doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` cut to the manifest's features: encoding it computes exactly the model's columns."""
    wanted = {f.name for f in manifest.features}
    return {**doc, **{role: [s for s in doc[role] if s["output"] in wanted] for role in FEATURE_ROLES}}


def prepared_schema(manifest: Manifest, doc: Mapping[str, Any]) -> dict[str, str]:
    """Column -> the kind of Arrow type a "prepared" shard holds it as (docs/MANIFEST.md)."""
    from lakeprep_contracts.encode import input_columns, subword_entries
    from lakeprep_contracts.labels import TARGET, fitted_target

    doc = transform_for_features(manifest, doc)
    roles = {s["name"]: role for role in FEATURE_ROLES for s in doc[role] if "pca_component" not in s}
    roles.update({s["name"]: "numeric" for s in (doc.get("pca") or {}).get("inputs", [])})
    columns = {"id": "string", manifest.label.name: "integer"}
    if fitted_target(doc["label"]) is not None:  # a continuous label's value (lakeprep_contracts.labels)
        columns[TARGET] = "number"
    for name in input_columns(doc):
        columns[name] = {"numeric": "number", "categorical": "string", "text": "strings"}[roles[name]]
    for spec in subword_entries(doc):  # a text the tokenizer file encodes: its cleaned string
        columns[spec["name"]] = "string"
    return columns


def shard_schema(manifest: Manifest) -> dict[str, str]:
    """Column -> the kind of Arrow type the contract promises for it."""
    columns = {"id": "string", manifest.label.name: "integer"}
    for f in manifest.features:
        columns[f.name] = {"numeric": "floating", "categorical": "integer", "text": "list"}[f.role]
    return columns


def _type_matches(kind: str, arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if kind == "string":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if kind == "number":  # a prepared numeric: double (null or NaN missing); any number encodes
        return pa.types.is_floating(arrow_type) or pa.types.is_integer(arrow_type)
    if kind == "strings":  # a prepared text: its tokens
        return (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and _type_matches(
            "string", arrow_type.value_type
        )
    if kind == "integer":
        return pa.types.is_integer(arrow_type)
    if kind == "floating":
        return pa.types.is_floating(arrow_type)
    return (
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    ) and pa.types.is_integer(arrow_type.value_type)


def expected_columns(manifest: Manifest) -> dict[str, str]:
    """Column -> the kind of Arrow type the manifest's shards hold it as, encoded or prepared.

    Prepared shards need the transform's document (:func:`with_transform_document`).
    """
    if manifest.shard_columns != "prepared":
        return shard_schema(manifest)
    if manifest.transform_document is None:
        raise ValueError(
            f"{manifest.location}: shard_columns is 'prepared', and the transform document is not "
            "loaded: read it with lakeprep_train.manifest.with_transform_document(manifest)"
        )
    return prepared_schema(manifest, manifest.transform_document)


def column_problems(schema: pa.Schema, expected: Mapping[str, str]) -> list[str]:
    """Each expected column that ``schema`` lacks or holds as another kind of type."""
    problems = []
    for column, kind in expected.items():
        index = schema.get_field_index(column)
        if index < 0:
            problems.append(f"column {column!r} is missing")
        elif not _type_matches(kind, schema.field(index).type):
            problems.append(f"column {column!r} has type {schema.field(index).type}, expected {kind}")
    return problems


def verify_shards(manifest: Manifest) -> list[str]:
    """Check every shard's bytes, sha256, Parquet row count and columns against the manifest.

    Reads each file once in full (for the checksum), however many entries slice it.
    Prepared shards are checked against the transform's input columns and their roles
    (the transform read and checked here unless the manifest carries it). Returns
    human-readable problems, each naming the split, shard path and field; an empty list
    means the shards are what the manifest says.
    """
    problems: list[str] = []
    if manifest.shard_columns == "prepared" and manifest.transform_document is None:
        try:
            manifest = with_transform_document(manifest)
        except ManifestError as err:
            return list(err.problems)
    expected = expected_columns(manifest)
    files: dict[str, tuple[int, str] | None] = {}  # location -> (rows, schema problems); None: unreadable
    for split in manifest.splits.values():
        for i, shard in enumerate(split.shards):
            at = f"splits.{split.name}.shards[{i}] ({shard.path})"
            if shard.location not in files:
                files[shard.location] = _verify_file(shard, at, expected, problems)
            found = files[shard.location]
            if found is None:
                continue
            problem = shard.file_rows_problem(found)
            if problem:
                problems.append(
                    f"{at}.rows: manifest says {shard.rows} from offset {shard.offset}, Parquet footer "
                    f"says {found}: the file {problem}"
                )
    return problems


def _verify_file(shard: Shard, at: str, expected: Mapping[str, str], problems: list[str]) -> int | None:
    """The file's bytes, sha256 and columns into ``problems``; its row count (None: unreadable)."""
    try:
        with storage.open_input(shard.location) as f:
            size = f.size()
            digest = hashlib.sha256()
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    except OSError as err:
        problems.append(f"{at}: cannot read {shard.location}: {err}")
        return None
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
        return None
    problems += [f"{at}: {p}" for p in column_problems(schema, expected)]
    return metadata.num_rows


def rows_per_rank_for(rows: int, world_size: int, remainder: str) -> int:
    """Rows each of ``world_size`` ranks reads of ``rows``: drop the remainder or pad it up.

    The one place of this arithmetic: the exporter's plan obeys it for the spec's world
    size, the trainer's read-time plan (``dataset.plan_rank``) for the one it finds.
    """
    return rows // world_size if remainder == "drop" else math.ceil(rows / world_size)


def _steps_by_world_size(train: Split, world_sizes: Sequence[int] = (1, 2, 3, 4, 8)) -> str:
    """What the trainer's read-time plan gives per epoch for common world sizes."""
    n, batch = sum(s.rows for s in train.shards), train.plan.batch_size
    parts = []
    for w in world_sizes:
        if n < w:
            parts.append(f"{w}: refused, fewer rows than ranks")
            continue
        per_rank = rows_per_rank_for(n, w, train.plan.remainder)
        change = n - per_rank * w
        extra = f", {change} dropped" if change > 0 else f", {-change} padded" if change < 0 else ""
        parts.append(f"{w}: {per_rank} rows/rank, {math.ceil(per_rank / batch)} steps{extra}")
    return "train per epoch by world size: " + "; ".join(parts)


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
        f"{s.name} {s.rows} rows in {len(s.shards)} shards, planned for {s.plan.world_size} rank(s)"
        for s in manifest.splits.values()
    )
    print(f"{args.manifest}: ok, {n_shards} shards verified ({summary})")
    print(_steps_by_world_size(manifest.split("train")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
