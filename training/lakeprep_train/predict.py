"""Score raw records with a trained model folder: no Spark, no lake.

    python -m lakeprep_train.predict --model <model dir> --input <raw .csv|.jsonl|.parquet> \\
        [--reference NAME=PATH ...] [--reference-date YYYY-MM-DD] \\
        [--output predictions.jsonl|predictions.parquet]

The model folder is what the trainer writes: ``model.pt`` and the ``transform.json``
the shards were made with. Each input row is checked against the raw contract and
encoded exactly as training rows were (:mod:`lakeprep_train.serving`), then scored. The
output has one row per input row, in input order: ``id``, ``prediction`` (a class of
``label.classes``) and ``probabilities`` (class -> probability) for an accepted row,
``reason`` for a rejected one. Named classes (the transform's ``label.names``) are
printed by name: ``"prediction": "Gentoo"``, ``"probabilities": {"Adelie": ...}``,
``"label": "Gentoo"``. A continuous label (the transform's ``label.type``) is a
regression: ``prediction`` is a number on the label's scale, the model's output times
the transform's ``label.target.std`` plus its ``mean`` (the model regresses the
standardised value), ``label`` the row's value, and there are no probabilities. The
label is optional: an accepted row has ``label`` when its label is present and one of
``label.classes`` (a finite number, for a continuous label; compare it with
``prediction`` for metrics); a blank or null label is no label; a present label that is
not a class (or not a number, or does not parse) is scored without it, and
``label_reason`` says why.
The counts go to stderr: rows read = accepted + rejected, and which snapshot of each
reference was joined: a reference folder of dated snapshots (``dt=YYYY-MM-DD/``) gives
its newest complete one, or with ``--reference-date`` the one preprocess joined for that
day (to score a past day as it was trained).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from lakeprep_contracts import layout
from lakeprep_contracts.labels import class_text, fitted_target, is_integer
from lakeprep_train import serving, storage
from lakeprep_train import transform as tf
from lakeprep_train.dataset import ID_DTYPE, NUMERIC_DTYPE
from lakeprep_train.evaluate import class_probabilities, target_values
from lakeprep_train.manifest import Feature
from lakeprep_train.model import TabularMLP

MODEL_FILE = layout.MODEL_WEIGHTS
TRANSFORM_FILE = layout.TRANSFORM


class ModelFolderError(ValueError):
    """A model folder that cannot serve: a file missing, or model and transform disagreeing."""


@dataclass
class LoadedModel:
    model: TabularMLP
    features: tuple[Feature, ...]
    classes: tuple[int, ...]
    transform: dict[str, Any]
    folder: str
    # A continuous label's standardisation (the transform's `label.target`: mean, std), or
    # None for classes: the model's output is then (value - mean) / std.
    target: Mapping[str, Any] | None = None

    @property
    def names(self) -> tuple[Any, ...]:
        """What a class is printed as, per model output: the named class
        (``label.names``, lakeprep_contracts.labels), else the integer class."""
        return tuple(self.transform["label"].get("names") or self.classes)


def load_model(folder: str) -> LoadedModel:
    """The model as ``train.py`` saved it, with its transform; checked to fit each other.

    Every model feature must be an output of the transform, with the same id range
    (``cardinality``) and, for text, the same token count: a mismatch would score
    garbage or fail deep inside an embedding, so it fails here, naming both values.
    """
    model_path = storage.join(folder, MODEL_FILE)
    transform_path = storage.join(folder, TRANSFORM_FILE)
    try:
        with storage.open_input(model_path) as f:
            checkpoint = torch.load(io.BytesIO(f.read()), map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError) as err:
        raise ModelFolderError(f"{model_path}: cannot load the model: {err}") from err
    try:
        doc = tf.load_transform(transform_path)
    except tf.TransformError as err:
        if "cannot read" in str(err):
            raise ModelFolderError(
                f"{transform_path}: missing; the trainer copies it from the manifest's transform "
                "(a model trained on a manifest without one cannot serve)"
            ) from err
        raise
    features = tuple(
        Feature(
            f["name"], f["role"], f["dtype"], tuple(f["shape"]), f.get("cardinality"), f.get("vocab_size")
        )
        for f in checkpoint["features"]
    )
    classes = tuple(checkpoint["label"]["classes"])
    specs = {spec["output"]: (role, spec) for role in tf.ROLES for spec in doc[role]}
    problems = []
    for f in features:
        if f.name not in specs:
            problems.append(f"model feature {f.name!r} is not an output of the transform")
            continue
        role, spec = specs[f.name]
        if role != f.role:
            problems.append(f"{f.name}: the model has it as {f.role}, the transform as {role}")
        elif role == "categorical" and spec["cardinality"] != f.cardinality:
            problems.append(f"{f.name}: model cardinality {f.cardinality}, transform {spec['cardinality']}")
        elif role == "text" and (spec["cardinality"] != f.vocab_size or spec["max_tokens"] != f.length):
            problems.append(
                f"{f.name}: model vocab_size {f.vocab_size} x {f.length} tokens, transform cardinality "
                f"{spec['cardinality']} x max_tokens {spec['max_tokens']}"
            )
    if list(classes) != list(doc["label"]["classes"]):
        problems.append(f"label classes: model {list(classes)}, transform {doc['label']['classes']}")
    target = fitted_target(doc["label"])
    trained = checkpoint["label"].get("target")
    if target is not None and trained != target:
        problems.append(
            f"label {doc['label']['column']!r} is continuous: the transform standardises it by "
            f"{dict(target)}, the model was trained on {trained if trained is None else dict(trained)}"
        )
    elif target is None and trained is not None:
        problems.append(
            f"the model regresses a continuous label (trained on {dict(trained)}), the transform's "
            f"label {doc['label']['column']!r} has classes {doc['label']['classes']}"
        )
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ModelFolderError(f"{folder}: {MODEL_FILE} and {TRANSFORM_FILE} do not fit together:\n{listed}")
    model = TabularMLP(
        features, len(classes), hidden=tuple(checkpoint["hidden"]), regression=target is not None
    )
    model.load_state_dict(checkpoint["state_dict"])
    model.eval()
    return LoadedModel(model, features, classes, doc, folder, target)


def feature_tensors(
    encoded: Mapping[str, np.ndarray], features: Sequence[Feature]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(numeric, categorical, text) as the model takes them: the layout of ``FeatureLayout``.

    Numerics ``[n, n_numeric]``, categoricals ``[n, n_categorical]``, text ``[n, n_text,
    longest]`` with shorter features padded by 0, in model order, in the dtypes of
    ``dataset.Batch``.
    """
    numeric_f = [f for f in features if f.role == "numeric"]
    categorical_f = [f for f in features if f.role == "categorical"]
    text_f = [f for f in features if f.role == "text"]
    n = len(next(iter(encoded.values()))) if encoded else 0
    numeric = np.empty((n, len(numeric_f)), dtype=NUMERIC_DTYPE)
    for j, f in enumerate(numeric_f):
        numeric[:, j] = encoded[f.name]
    categorical = np.empty((n, len(categorical_f)), dtype=ID_DTYPE)
    for j, f in enumerate(categorical_f):
        categorical[:, j] = encoded[f.name]
    width = max((f.length for f in text_f), default=0)
    text = np.zeros((n, len(text_f), width), dtype=ID_DTYPE)
    for j, f in enumerate(text_f):
        text[:, j, : f.length] = encoded[f.name]
    return torch.from_numpy(numeric), torch.from_numpy(categorical), torch.from_numpy(text)


def score(loaded: LoadedModel, encoded: Mapping[str, np.ndarray], *, batch_size: int = 4096) -> np.ndarray:
    """Class probabilities ``[n, n_classes]`` (label.classes order) of encoded rows; for a
    regression, the predicted values ``[n]`` on the label's scale (output * std + mean)."""
    numeric, categorical, text = feature_tensors(encoded, loaded.features)
    parts = []
    with torch.no_grad():
        for start in range(0, numeric.shape[0], batch_size):
            end = start + batch_size
            logits = loaded.model(numeric[start:end], categorical[start:end], text[start:end])
            if loaded.target is not None:
                parts.append(target_values(logits, loaded.target))
            else:
                parts.append(class_probabilities(logits))
    if not parts:
        shape = (0,) if loaded.target is not None else (0, len(loaded.classes))
        return np.zeros(shape, dtype=np.float64)
    return np.concatenate(parts)


def predict_rows(
    loaded: LoadedModel,
    source: str | pa.Table,
    *,
    references: Mapping[str, str | pa.Table] | None = None,
    reference_date: str | None = None,
) -> tuple[list[dict[str, Any]], serving.Served]:
    """One output row per input row, in input order (see the module docstring)."""
    served = serving.serve(source, loaded.transform, references=references, reference_date=reference_date)
    scores = score(loaded, served.features)
    names = list(loaded.names)
    # The prepared label is the class (integer classes) or its id (named): its index here.
    index = {int(c): k for k, c in enumerate(loaded.classes)}
    rows: list[dict[str, Any] | None] = [None] * served.rows_read
    ids = served.features.get("id")
    labels = served.labels
    unused = {u["row"]: u["reason"] for u in served.unused_labels}
    for k, position in enumerate(served.accepted):
        row: dict[str, Any] = {
            "row": int(position),
            "line": int(served.lines[position]),
            "id": None if ids is None else ids[k],
        }
        if loaded.target is not None:  # a regression: the value, on the label's scale
            row["prediction"] = float(scores[k])
        else:
            p = scores[k]
            row["prediction"] = names[int(np.argmax(p))]
            row["probabilities"] = {class_text(c): float(v) for c, v in zip(names, p, strict=True)}
        if labels is not None and not np.isnan(labels[k]):
            row["label"] = float(labels[k]) if loaded.target is not None else names[index[int(labels[k])]]
        if int(position) in unused:
            row["label_reason"] = unused[int(position)]
        rows[position] = row
    for rejected in served.rejected:
        rows[rejected["row"]] = dict(rejected)
    return [r for r in rows if r is not None], served


def write_predictions(
    rows: Sequence[Mapping[str, Any]], classes: Sequence[Any] | None, output: str | None
) -> None:
    """JSON lines (``.jsonl``, or stdout when ``output`` is None) or Parquet (``.parquet``).

    Parquet flattens probabilities into ``probability__<class>`` columns; ``classes`` None
    is a regression's output: ``prediction`` and ``label`` are doubles, no probabilities.
    Written to ``<output>.partial`` and renamed, so a reader never sees half a file.
    """
    if output is None:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    partial = f"{output}.partial"
    if output.endswith(".parquet"):
        columns: dict[str, list[Any]] = {
            "row": [r["row"] for r in rows],
            "line": [r["line"] for r in rows],
            "id": [r.get("id") for r in rows],
            "label": [r.get("label") for r in rows],
            "label_reason": [r.get("label_reason") for r in rows],
            "prediction": [r.get("prediction") for r in rows],
            **{
                f"probability__{class_text(c)}": [r.get("probabilities", {}).get(class_text(c)) for r in rows]
                for c in classes or ()
            },
            "reason": [r.get("reason") for r in rows],
        }
        # A class column has the classes' type: int32, or what Arrow makes of named classes;
        # a regression's value is a double.
        if classes is None:
            kind = pa.float64()
        else:
            kind = pa.int32() if is_integer(classes) else pa.array(list(classes)).type
        types = {"row": pa.int64(), "line": pa.int64(), "id": pa.string(), "label": kind}
        types["label_reason"] = pa.string()
        types.update({"prediction": kind, "reason": pa.string()})
        table = pa.table({k: pa.array(v, types.get(k, pa.float64())) for k, v in columns.items()})
        pq.write_table(table, partial)
    else:
        with open(partial, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    os.replace(partial, output)


def _references(values: Sequence[str]) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise argparse.ArgumentTypeError(f"--reference {value!r}: expected NAME=PATH")
        out[name] = path
    return out


def _iso_date(value: str) -> str:
    import datetime as dt

    try:
        if dt.date.fromisoformat(value).isoformat() == value:
            return value
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"--reference-date {value!r}: expected YYYY-MM-DD")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lakeprep_train.predict", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", required=True, help="model folder: model.pt and transform.json")
    parser.add_argument("--input", required=True, help="raw records: .csv, .jsonl/.json or .parquet")
    parser.add_argument(
        "--reference", action="append", default=[], metavar="NAME=PATH", help="a reference table, per name"
    )
    parser.add_argument(
        "--reference-date",
        type=_iso_date,
        metavar="YYYY-MM-DD",
        help="join each reference's snapshot of this day (default: its newest complete snapshot)",
    )
    parser.add_argument("--output", help="predictions .jsonl or .parquet (default: JSON lines on stdout)")
    args = parser.parse_args(argv)
    try:
        references = _references(args.reference)
        loaded = load_model(args.model)
        rows, served = predict_rows(
            loaded, args.input, references=references, reference_date=args.reference_date
        )
        write_predictions(rows, None if loaded.target is not None else loaded.names, args.output)
    except (argparse.ArgumentTypeError, ValueError, OSError) as err:
        print(f"predict failed: {err}", file=sys.stderr)
        return 2
    accepted = len(served.accepted)
    print(
        f"{args.input}: rows read {served.rows_read} = accepted {accepted} + rejected {len(served.rejected)}",
        file=sys.stderr,
    )
    for name, read in served.reference_snapshots.items():
        when = f"snapshot {read['snapshot']}" if read["snapshot"] else "no snapshots"
        print(f"reference {name}: {read['uri']} ({when})", file=sys.stderr)
    if served.rejected:
        print(f"rejected by reason: {served.reason_counts}", file=sys.stderr)
    if served.labels is not None:
        labelled = int((~np.isnan(served.labels)).sum())
        print(f"accepted rows with a label: {labelled} of {accepted}", file=sys.stderr)
    if served.unused_labels:
        print(f"scored without their label, by reason: {served.unused_label_counts}", file=sys.stderr)
    if served.missing_columns:
        print(f"columns not in the input (read as null): {served.missing_columns}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
