"""The stage command line: the argv every stage parses and its params dataclass built from it.

Every stage is submitted the same way (the Airflow operator builds this argv):

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/<stage>.py \
        --input URI [--input URI ...] --output URI --params JSON [--error-file PATH]

`--error-file` (a path on the driver's machine) receives the stage's own error when it
fails (`lakeprep_jobs.failure`). Several stages can share one submission
(`lakeprep_jobs.fused`): each gets this same argv, error file included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from lakeprep_contracts import submission

P = TypeVar("P")


@dataclasses.dataclass(frozen=True)
class StageArgs:
    inputs: list[str]
    output: str
    params: dict[str, Any]
    error_file: str | None = None


def parse_args(argv: Sequence[str] | None, description: str) -> StageArgs:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--input", action="append", required=True, dest="inputs")
    parser.add_argument("--output", required=True)
    parser.add_argument("--params", required=True, help="stage parameters as a JSON object")
    parser.add_argument("--error-file", help="local file that receives the error message on failure")
    ns = parser.parse_args(submission.decode_argv(argv))  # YARN cluster mode: encoded
    try:
        params = json.loads(ns.params)
    except json.JSONDecodeError as err:
        raise ValueError(f"--params is not valid JSON: {err}") from err
    if not isinstance(params, dict):
        raise ValueError(f"--params must be a JSON object, got {type(params).__name__}")
    return StageArgs(inputs=ns.inputs, output=ns.output, params=params, error_file=ns.error_file)


def params_from(cls: type[P], params: dict[str, Any]) -> P:
    """Build a frozen params dataclass; an unknown or missing key fails before Spark starts."""
    try:
        return cls(**params)
    except TypeError as err:
        fields = sorted(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        raise ValueError(f"bad --params for {cls.__name__}: {err}; expected keys {fields}") from err
