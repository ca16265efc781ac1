"""A validated dataset spec and the error every refusal raises."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SpecError(ValueError):
    """A dataset spec is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class DatasetSpec:
    """A validated dataset spec (the parsed YAML with defaults filled in)."""

    path: Path
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def dag_id(self) -> str:
        return f"lakeprep_{self.name}"

    @property
    def stages(self) -> dict[str, dict[str, Any]]:
        return self.data["stages"]

    @property
    def training(self) -> dict[str, Any]:
        return self.data["training"]

    @property
    def source(self) -> dict[str, Any]:
        return self.data["source"]

    def all_columns(self) -> list[dict[str, Any]]:
        """Raw, derived and reference columns, in the order they are produced."""
        cols = [*self.data["columns"], *self.data["derived"]]
        for ref in self.data.get("references", []):
            cols.extend(ref["columns"])
        return cols

    def columns_with_role(self, role: str) -> list[str]:
        return [c["name"] for c in self.all_columns() if c["role"] == role]

    def with_overrides(self, overrides: dict[str, Any]) -> DatasetSpec:
        """Return a re-validated copy with dotted-path overrides applied.

        Trigger-form values (``{"stages.sample.seed": 3}``) land here, so they pass the same
        schema as the file: a bad value is refused before any job starts.
        """
        data = copy.deepcopy(self.data)
        for dotted, value in overrides.items():
            *parents, leaf = dotted.split(".")
            node = data
            for key in parents:
                if not isinstance(node.get(key), dict):
                    raise SpecError(f"{self.path}: override {dotted!r} does not name a spec field")
                node = node[key]
            if leaf not in node:
                raise SpecError(f"{self.path}: override {dotted!r} does not name a spec field")
            node[leaf] = value
        # The validation runs the checks, which take a DatasetSpec: imported when used.
        from lakeprep_airflow.spec import _validated

        return _validated(self.path, data)
