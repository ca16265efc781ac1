"""`DriftCheckOperator` (`check_drift`): each feature of the run's day against its window.

Reads only statistics, never data: the run's day's `_stats.json` (validate's, and
preprocess's for reference-table columns when it wrote one) and those of the window's
earlier days that exist and are committed (`_SUCCESS`). `lakeprep_airflow.drift`
computes PSI (numeric) or Jensen-Shannon distance (categorical, text tokens) per
feature, each beside the noise its rows imply, and the largest shift of a mean or a
value's share; a column marked `drift: ignore` is recorded, never judged. The report
goes to `<lake>/check_drift/<dataset>/dt=<ds>/drift.json` (atomically) and is the
task's XCom. With `stages.check_drift.action: stop` a drifting
feature fails the task, after the report is written, naming feature, value and
threshold; with `warn` (the default) it is logged and recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from lakeprep_airflow import drift, lake_fs
from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.lineage import DriftLineageMixin
from lakeprep_airflow.locations import require_lake_root
from lakeprep_airflow.run_spec import RUN_SPEC_FIELDS, RunSpecMixin
from lakeprep_contracts import documents, layout, records

if TYPE_CHECKING:
    from airflow.sdk import Context

STAGE = "check_drift"
# The stages that write `_stats.json`, in the order their columns are merged.
STATS_STAGES = ("validate", "preprocess")


def drift_params(spec: spec_mod.DatasetSpec) -> dict[str, Any]:
    """The spec's `stages.check_drift` (defaults filled from lakeprep_contracts.knobs)."""
    return dict(spec.stages[STAGE])


def judged_columns(spec: spec_mod.DatasetSpec) -> list[str]:
    """The spec's feature columns (raw, derived, reference), then the label (prior shift)."""
    features = [c["name"] for c in spec.all_columns() if c["role"] in records.FEATURE_ROLES]
    return [*features, spec.data["label"]["column"]]


def ignored_columns(spec: spec_mod.DatasetSpec) -> list[str]:
    """The columns marked `drift: ignore` (calendar features): recorded, never drift."""
    return [c["name"] for c in spec.all_columns() if c.get("drift") == drift.IGNORE]


class DriftCheckOperator(RunSpecMixin, DriftLineageMixin, BaseOperator):
    """Compare the run's day's statistics with the window's earlier days, per feature.

    :param spec_path: the dataset spec (`stages.check_drift`, the window). (templated)
    :param lake_root: lake root URI; defaults to the `lakeprep_lake_root` Variable. (templated)
    :param run_ds: the partition date, YYYY-MM-DD; defaults to the run's logical date. (templated)
    :param overrides: dotted spec paths to values from the trigger form. (templated)
    :param webhdfs_conn_id: connection used for `hdfs://` lakes.
    """

    template_fields: Sequence[str] = RUN_SPEC_FIELDS
    ui_color = "#fdf2d0"

    def __init__(self, **kwargs: Any) -> None:
        # The spec fields are RunSpecMixin's; an own __init__ lets Airflow apply default_args.
        super().__init__(**kwargs)

    def read_day(self, lake_root: str, dataset: str, ds: str) -> tuple[dict[str, Any] | None, list[str]]:
        """One day's stats (validate's, then preprocess's columns), or None; and the files read.

        A stats file counts only in a committed partition (`_SUCCESS`): a partition that
        validate refused (too many rows quarantined) is written for inspection without
        one, and is not a reference for what normal data looks like.
        """
        docs, read = [], []
        for stage in STATS_STAGES:
            partition = spec_mod.lake_uri(lake_root, stage, dataset, ds)
            fs, path = lake_fs.resolve(partition, webhdfs_conn_id=self.webhdfs_conn_id)
            stats = lake_fs.join(path, layout.STATS)
            if not (fs.exists(lake_fs.join(path, layout.SUCCESS)) and fs.exists(stats)):
                if stage == STATS_STAGES[0]:
                    return None, []  # without validate's view the day has no statistics
                continue
            uri = layout.join(partition, layout.STATS)
            try:
                doc = json.loads(fs.read_bytes(stats))
            except ValueError as err:
                raise ValueError(f"{uri}: not a JSON statistics document: {err}") from err
            documents.require("stats", doc, uri)
            docs.append(doc)
            read.append(uri)
        return drift.merge_stats(docs), read

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.run_spec()
        lake_root = require_lake_root(self.lake_root)
        params = drift_params(spec)
        days = spec_mod.run_window(spec, self.run_ds)  # oldest first, ending at run_ds
        current, stats_files = self.read_day(lake_root, spec.name, self.run_ds)
        if current is None:
            validate = spec_mod.lake_uri(lake_root, "validate", spec.name, self.run_ds)
            raise FileNotFoundError(
                f"check_drift needs {layout.join(validate, layout.STATS)} in a committed validate "
                f"partition (with {layout.SUCCESS}); did validate run for {self.run_ds}?"
            )
        reference = []
        for day in days[:-1]:
            doc, read = self.read_day(lake_root, spec.name, day)
            if doc is not None:
                reference.append(doc)
                stats_files += read
        self.log.info(
            "check_drift %s: %d of %d earlier day(s) of the window have statistics",
            self.run_ds,
            len(reference),
            len(days) - 1,
        )
        report = {
            "dataset": spec.name,
            "logical_date": self.run_ds,
            "run_id": context.get("run_id") or "",
            **drift.drift_report(
                current, reference, params, columns=self._present(spec, current), ignore=ignored_columns(spec)
            ),
            "stats_files": stats_files,
        }
        documents.require("drift", report, f"drift report of {spec.name} {self.run_ds}")
        output = spec_mod.lake_uri(lake_root, STAGE, spec.name, self.run_ds)
        fs, path = lake_fs.resolve(output, webhdfs_conn_id=self.webhdfs_conn_id)
        # Column order kept (the spec's); strict JSON: a NaN here would be a bug in drift.
        body = json.dumps(report, indent=2, allow_nan=False).encode()
        lake_fs.write_atomic(fs, lake_fs.join(path, layout.DRIFT), body)
        for name, feature in report["features"].items():
            self.log.info("drift %s", drift.describe(name, feature))
        self.log.info(
            "check_drift %s: %s, report %s", self.run_ds, report["status"], layout.join(output, layout.DRIFT)
        )
        try:
            drift.enforce(report)
        except drift.DriftError as err:
            # The same statistics give the same verdict: a retry would only repeat it.
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(str(err)) from err
        return report

    def _present(self, spec: spec_mod.DatasetSpec, current: dict[str, Any]) -> list[str]:
        """The judged columns that the stats describe; the others are logged, not judged.

        Stats cover what validate and preprocess saw; a derived column validate did not
        profile is a gap in the statistics, not drift, so it is named in the log only.
        """
        wanted = judged_columns(spec)
        absent = [c for c in wanted if c not in current["columns"]]
        if absent:
            self.log.warning("check_drift %s: no statistics for %s; not judged", self.run_ds, absent)
        return [c for c in wanted if c in current["columns"]]
