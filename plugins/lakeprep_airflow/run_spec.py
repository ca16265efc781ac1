"""What every lakeprep task shares: the dataset spec it runs, with the trigger form applied.

Every task takes the same four templated fields (`spec_path`, `lake_root`, `run_ds`,
`overrides`) and re-reads and re-validates the spec when it starts, so a spec edited
between parse and run, or a bad trigger-form value, is refused before any work, and
without retries (`SpecRefused`): the same file and values would be refused again.
`RunSpecMixin` holds them for operators and sensors alike (cooperative: it forwards the
remaining keyword arguments to the Airflow base class).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.locations import LAKE_ROOT_TEMPLATE, RUN_DS_TEMPLATE, require_lake_root

RUN_SPEC_FIELDS: Sequence[str] = ("spec_path", "lake_root", "run_ds", "overrides")


def parse_overrides(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Rendered template values arrive as strings: read them back as JSON scalars.

    `"0.5"` -> 0.5, `"7"` -> 7, `"true"` -> True; anything that is not JSON stays a string
    (and the spec schema then decides whether a string is acceptable there).
    """
    parsed: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                pass
        parsed[key] = value
    return parsed


class SpecRefused(AirflowFailException, spec_mod.SpecError):
    """The run's spec (the file with the trigger form's values) does not validate.

    An AirflowFailException, so the task fails without retries (Airflow's task runner
    fails one at once, task_runner.py `_run_task_and_map_outcome`), and still a SpecError
    (a ValueError) naming the file and the field.
    """


class RunSpecMixin:
    """The run's spec fields; put it before the Airflow base class.

    :param spec_path: path of the dataset's YAML spec on the worker. (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values, typically from `params`
        (`{"stages.sample.seed": "{{ params.seed }}"}`), validated like the file. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    def __init__(
        self,
        *,
        spec_path: str,
        lake_root: str = LAKE_ROOT_TEMPLATE,
        run_ds: str = RUN_DS_TEMPLATE,
        overrides: dict[str, str] | None = None,
        webhdfs_conn_id: str = "webhdfs_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.lake_root = lake_root
        self.run_ds = run_ds
        self.overrides = overrides
        self.webhdfs_conn_id = webhdfs_conn_id

    def run_spec(self) -> spec_mod.DatasetSpec:
        """The spec file, re-validated with this run's overrides applied.

        Raises SpecRefused when it does not validate. A file that cannot be read (a
        volume not mounted yet, a deploy half-way) stays a plain SpecError, retried.
        """
        try:
            return spec_mod.load_spec(self.spec_path).with_overrides(parse_overrides(self.overrides))
        except spec_mod.SpecError as err:
            if isinstance(err.__cause__, OSError):
                raise
            raise SpecRefused(str(err)) from err

    def lake_root_uri(self) -> str:
        return require_lake_root(self.lake_root)
