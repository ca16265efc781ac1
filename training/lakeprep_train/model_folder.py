"""The model folder a run leaves: what `predict` needs, and nothing else to serve from.

``metrics.json``, ``telemetry.json`` and ``model.pt`` (the weights, the features and the
label), and the fitted ``transform.json`` with the tokenizer files it names, each written
atomically. The transform is read and checked against the manifest's sha256 before
training starts, so a wrong or missing one fails the run at once, not after the epochs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from lakeprep_contracts import layout
from lakeprep_train import storage
from lakeprep_train.manifest import Manifest
from lakeprep_train.model import HIDDEN
from lakeprep_train.preflight import PreflightError

log = logging.getLogger("lakeprep_train")

TRANSFORM_FILE, METRICS_FILE, TELEMETRY_FILE, MODEL_FILE = (
    layout.TRANSFORM,
    layout.METRICS,
    layout.TELEMETRY,
    layout.MODEL_WEIGHTS,
)


def read_transform(manifest: Manifest) -> bytes | None:
    """The bytes of the manifest's fitted transform, checked against its sha256; None if it has none.

    A manifest from before ``fit_transform`` has no transform: the model folder then
    cannot serve, said in a log line.
    """
    ref = manifest.transform
    if ref is None:
        log.info("%s has no transform: model folder will not hold %s", manifest.location, TRANSFORM_FILE)
        return None
    try:
        with storage.open_input(ref.location) as f:
            data = f.read()
    except (OSError, ValueError) as err:
        raise PreflightError(
            f"{manifest.location}: transform.uri {ref.uri!r}: cannot read {ref.location}: {err}"
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256:
        raise PreflightError(
            f"{manifest.location}: transform.sha256 is {ref.sha256}, but {ref.location} has sha256 {digest}"
        )
    return data


def transform_tokenizer_files(manifest: Manifest, transform: bytes) -> dict[str, bytes]:
    """File name -> bytes of the tokenizer files beside the manifest's transform (checked
    against the sha256 the transform records); none for a transform without subword text."""
    from lakeprep_contracts.encode import tokenizer_files
    from lakeprep_train.transform import load_tokenizers

    doc = manifest.transform_document
    if doc is None:
        doc = load_tokenizers(json.loads(transform.decode("utf-8")), manifest.transform.location)
    return tokenizer_files(doc)


def saved_model(
    model: torch.nn.Module, manifest: Manifest, target: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What ``model.pt`` holds: the weights, the features and label they were trained on
    (a continuous label's standardisation as ``label.target``), the hidden layer sizes."""
    return {
        "state_dict": model.state_dict(),
        "features": [f.to_json() for f in manifest.features],
        "label": {
            "name": manifest.label.name,
            "classes": list(manifest.label.classes),
            **({"target": dict(target)} if target is not None else {}),
        },
        "hidden": list(HIDDEN),
        "manifest": manifest.location,
    }


def _write_json(path: str, value: Any) -> None:
    storage.write_atomically(path, lambda f: f.write(json.dumps(value, indent=2).encode() + b"\n"))


def write(
    output: str,
    *,
    metrics: Mapping[str, Any],
    telemetry: Mapping[str, Any],
    model: Mapping[str, Any],
    manifest: Manifest,
    transform: bytes | None,
) -> list[str]:
    """Write the model folder; the names written, in order."""
    os.makedirs(output, exist_ok=True)
    _write_json(os.path.join(output, METRICS_FILE), metrics)
    _write_json(os.path.join(output, TELEMETRY_FILE), telemetry)
    storage.write_atomically(os.path.join(output, MODEL_FILE), lambda f: torch.save(dict(model), f))
    written = [METRICS_FILE, MODEL_FILE, TELEMETRY_FILE]
    if transform is not None:
        storage.write_atomically(os.path.join(output, TRANSFORM_FILE), lambda f: f.write(transform))
        written.append(TRANSFORM_FILE)
        # The tokenizer files the transform names, beside it: the model folder alone serves.
        for name, data in transform_tokenizer_files(manifest, transform).items():
            storage.write_atomically(os.path.join(output, name), lambda f, data=data: f.write(data))
            written.append(name)
    return written
