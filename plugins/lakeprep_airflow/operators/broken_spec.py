"""`BrokenSpecOperator`: the one task of a DAG whose dataset spec does not load.

A spec that fails validation at parse time does not remove its DAGs: `dag_factory`
builds stand-ins under the same ids whose only task fails with the spec's error
(docs/SPEC.md#a-broken-spec). Running it again gives the same error, so it fails
without retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class BrokenSpecOperator(BaseOperator):
    """Fail with why the dataset spec does not load.

    :param spec_path: the spec file that failed to load.
    :param error: its error, naming the file and the field (as `load_spec` raised it).
    """

    # The error may hold `{{`: it is shown as it is, never rendered.
    template_fields: Sequence[str] = ()
    ui_color = "#f8d7da"

    def __init__(self, *, spec_path: str, error: str, **kwargs: Any) -> None:
        kwargs.setdefault("retries", 0)
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.error = error

    def execute(self, context: Context) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(
            f"dataset spec {self.spec_path} does not load; fix it (python -m lakeprep_airflow.spec_check "
            f"{self.spec_path}) and the DAG comes back:\n{self.error}"
        )
