"""`RetrainHandoffOperator`: the handoff of `lakeprep_<name>_train`, one model folder per run.

The same trainer on the same export as the main DAG's `gpu_training_handoff`, but a
retrain (another config, more epochs, another backend) must not overwrite the model the
daily run made (serving and the run summary read it), nor be lost to a rerun of that
day: the handoff commits a model folder by deleting and renaming
`models/<dataset>/dt=<ds>` as a whole, so a retrain is not nested inside it. Each train
run writes `<lake>/models/<dataset>/retrain/dt=<ds>/<run id>/` (committed the same way,
its staging folder `_staging/` beside it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_airflow.locations import require_lake_root
from lakeprep_airflow.operators.handoff import GpuTrainingHandoffOperator
from lakeprep_contracts import layout

if TYPE_CHECKING:
    from lakeprep_airflow import spec as spec_mod

RETRAIN_DIR = "retrain"


def run_folder_name(run_id: str) -> str:
    """A run id as one path segment: `:` and `+` are not allowed in HDFS names."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id.strip()).strip("._")
    if not name:
        raise ValueError(f"run id {run_id!r} gives no usable folder name")
    return name


class RetrainHandoffOperator(GpuTrainingHandoffOperator):
    """Train on a day's export into a folder of this run's own.

    :param retrain_id: names the run's model folder; defaults to the run id. (templated)
    :param kwargs: passed to `GpuTrainingHandoffOperator` (`spec_path`, `run_ds`, ...).
    """

    template_fields: Sequence[str] = (*GpuTrainingHandoffOperator.template_fields, "retrain_id")

    def __init__(self, *, retrain_id: str = "{{ run_id }}", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.retrain_id = retrain_id

    def locations(self, spec: spec_mod.DatasetSpec) -> tuple[str, str]:
        export_uri, _ = super().locations(spec)
        root = require_lake_root(self.lake_root)
        models = f"{root}/{layout.MODELS}/{spec.name}/{RETRAIN_DIR}"
        return export_uri, f"{models}/dt={self.run_ds}/{run_folder_name(self.retrain_id)}"
