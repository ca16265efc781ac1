"""`RunReportOperator`: the run's summary and report, written into the lake as the last task.

Collects what every stage of the run wrote (`lakeprep_airflow.summary.collect`) and writes
`summary.json`, `summary.md` and `report.html` to `<lake>/reports/<dataset>/dt=<ds>/`,
the page the Airflow UI's *Report* tab of the run shows (`lakeprep_airflow.report_app`).
Its own task, after the handoff: a failing plot is retried alone and never touches the
committed model, and it overwrites only its own folder, like every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from lakeprep_airflow.lineage import ReportLineageMixin
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin

if TYPE_CHECKING:
    from airflow.sdk import Context


class RunReportOperator(RunSpecMixin, ReportLineageMixin, BaseOperator):
    """Write the run's summary and HTML report for its partition date.

    :param spec_path: the dataset spec (its name). (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#eef6e8"

    def __init__(self, **kwargs: Any) -> None:
        # The spec fields are RunSpecMixin's; an own __init__ lets Airflow apply default_args.
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, str]:
        from lakeprep_airflow import summary  # not at parse time: the DAG file imports this module

        spec = self.run_spec()
        root = self.lake_root_uri()
        day = summary.collect(root, spec.name, self.run_ds, webhdfs_conn_id=self.webhdfs_conn_id)
        uri = summary.write(root, day, webhdfs_conn_id=self.webhdfs_conn_id)
        self.log.info("report written: %s (summary.md and summary.json beside it)", uri)
        return {"report_uri": uri}
