"""The JSON documents passed between runtimes, each checked against one JSON Schema.

    manifest   export_shards -> trainer        schemas/manifest.schema.json  (docs/MANIFEST.md)
    transform  fit_transform -> serving        schemas/transform.schema.json (docs/TRANSFORM.md)
    stats      validate, preprocess -> drift   schemas/stats.schema.json
    drift      check_drift -> people, reports  schemas/drift.schema.json
    sampling   export_shards -> people, reports schemas/sampling.schema.json (docs/MANIFEST.md)

The writer checks what it writes and the reader checks what it reads, against the same
file, so the two can only disagree about what a schema cannot say (the readers check
that themselves, e.g. `lakeprep_train.manifest`). The schemas are package data, read
with `importlib.resources`, so this works from a checkout, a wheel and the Spark jobs zip.

Two deliberate differences from plain draft 2020-12:

- "integer" means a JSON integer: `1.0` is refused. The documents are written by Python
  and Spark, where a float in a count field means the writer computed the wrong thing.
- A failed `pattern` reads as "expected <the schema's description>" instead of quoting
  the regular expression.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

KINDS = ("manifest", "transform", "stats", "drift", "sampling")
_NOUNS = {
    "manifest": "manifest",
    "transform": "transform",
    "stats": "statistics",
    "drift": "drift report",
    "sampling": "sampling report",
}


class DocumentError(ValueError):
    """A document that does not match its schema; lists every problem, each with its JSON path."""

    def __init__(self, kind: str, where: str, problems: Sequence[str]) -> None:
        self.kind = kind
        self.where = where
        self.problems = list(problems)
        listed = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {_NOUNS.get(kind, kind)} {where}:\n{listed}")


def _is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@cache
def _load(kind: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"unknown document kind {kind!r}; expected one of {list(KINDS)}")
    text = (resources.files("lakeprep_contracts") / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    loaded = _load(kind)
    _Validator.check_schema(loaded)  # a broken schema fails here, naming its keyword
    return _Validator(loaded, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a document kind (a copy: the cached one stays as shipped)."""
    return copy.deepcopy(_load(kind))


def json_path(parts: Sequence[str | int]) -> str:
    """`splits.train.shards[3].rank` from `["splits", "train", "shards", 3, "rank"]`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<top level>"


def _message(error: jsonschema.ValidationError) -> str:
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator == "pattern" and description:
        return f"expected {description}, got {error.instance!r}"
    return error.message


def _order(error: jsonschema.ValidationError) -> list[tuple[int, Any]]:
    # Paths mix keys and indices; (0, index) / (1, key) keeps them comparable.
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in error.absolute_path]


def problems(kind: str, doc: Any) -> list[str]:
    """Every way `doc` breaks the `kind` schema, as `<json path>: <what is wrong>`, by path.

    An empty list means the document has the right structure.
    """
    errors = sorted(_validator(kind).iter_errors(doc), key=_order)
    return [f"{json_path(list(e.absolute_path))}: {_message(e)}" for e in errors]


def require(kind: str, doc: Any, where: str) -> None:
    """Raise `DocumentError` naming `where` (a path or URI) and listing every problem."""
    found = problems(kind, doc)
    if found:
        raise DocumentError(kind, where, found)
