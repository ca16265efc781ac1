"""Dataset specs: one YAML file per dataset, validated, turned into per-stage parameters.

A spec is the single place where a dataset's facts live (where raw partitions land, the
column contract and roles, reference tables, every stage's knobs). The DAG factory reads
it at parse time (cheap: YAML + jsonschema, and the sqlglot expression checks only for
expressions not seen to pass before: `load_spec(checks_cache=...)`) and each stage
operator reads it again when it starts, with every check, so a spec edited between parse
and run is re-validated before any Spark job sees it. Spark jobs never read the spec:
they get the slice they need as `--params` JSON (see `stage_params`).

The package: `schema` (the JSON Schema and knob defaults), `dataset_spec` (DatasetSpec,
SpecError), `checks` (what the schema cannot say), `expressions` (the sqlglot checks and
their cache), `stage_params` (each stage's params and lake wiring); loading and discovery
are here, and every name callers use is importable from `lakeprep_airflow.spec`.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from lakeprep_airflow.spec.checks import check_semantics
from lakeprep_airflow.spec.dataset_spec import DatasetSpec, SpecError
from lakeprep_airflow.spec.schema import SPEC_SCHEMA, fill_defaults
from lakeprep_airflow.spec.stage_params import (
    DAILY_STAGES,
    REPORT_NAME,
    STAGES,
    WINDOW_STAGES,
    column_transforms,
    config_hash,
    expand,
    lake_uri,
    run_window,
    stage_io,
    stage_params,
    window_dates,
)

__all__ = [
    "DAILY_STAGES",
    "REPORT_NAME",
    "SPEC_SCHEMA",
    "STAGES",
    "WINDOW_STAGES",
    "DatasetSpec",
    "SpecError",
    "column_transforms",
    "config_hash",
    "discover_specs",
    "expand",
    "lake_uri",
    "load_spec",
    "pipelines_dir",
    "run_window",
    "stage_io",
    "stage_params",
    "window_dates",
]

_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _field_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def _validated(path: Path, raw: Any, checks_cache: Path | None = None) -> DatasetSpec:
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    data = fill_defaults(raw)
    validator = jsonschema.Draft202012Validator(
        SPEC_SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_field_path(e)}: {e.message}" for e in errors[:10]]
        raise SpecError(f"{path}: invalid dataset spec:\n  " + "\n  ".join(lines))
    spec = DatasetSpec(path=path, data=data)
    check_semantics(spec, checks_cache)
    return spec


def load_spec(path: str | os.PathLike[str], *, checks_cache: Path | None = None) -> DatasetSpec:
    """Read and validate one spec file. Raises SpecError naming the file and field.

    :param checks_cache: a folder where expression checks that passed are recorded, so the
        same expressions under the same code are not checked again (`expressions.check_expressions_once`:
        for the DAG file, parsed in a fresh process every few seconds). Without it every
        check runs.
    """
    path = Path(path)
    try:
        # libyaml's C loader when present: the pure-Python one is ~10x slower at every parse.
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506 (a safe loader)
    except OSError as err:
        raise SpecError(f"{path}: cannot read dataset spec: {err}") from err
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {err}") from err
    spec = _validated(path, raw, checks_cache)
    if path.stem != spec.name:
        raise SpecError(f"{path}: file name must match name {spec.name!r} ({spec.name}.yaml)")
    return spec


@cache
def _default_pipelines_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "pipelines"


def pipelines_dir() -> Path:
    """Where dataset specs live: $LAKEPREP_PIPELINES_DIR, else `<repo>/pipelines`."""
    env = os.environ.get("LAKEPREP_PIPELINES_DIR")
    return Path(env) if env else _default_pipelines_dir()


def discover_specs(directory: Path | None = None) -> list[Path]:
    directory = directory or pipelines_dir()
    return sorted(directory.glob("*.yaml"))
