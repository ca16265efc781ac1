"""A spec's SQL expressions checked with sqlglot, and the record of checks that passed.

sqlglot is imported where the check runs, so a process that never checks an expression
does not pay for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakeprep_airflow.spec.dataset_spec import SpecError
from lakeprep_contracts import layout

if TYPE_CHECKING:
    from lakeprep_airflow.spec.dataset_spec import DatasetSpec

logger = logging.getLogger(__name__)


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


def check_expressions_once(spec: DatasetSpec, checks_cache: Path | None) -> None:
    """`_check_expressions`, skipped when `checks_cache` records that the same inputs passed.

    The DAG processor forks a fresh child for every parse, and the check's first use of
    sqlglot in a process (its import, dialect and parser set-up) is most of a parse's own
    time (benchmarks/RESULTS.md, `parse`). So the DAG file passes a folder where a passed check
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
