"""lakeprep: one DAG per dataset spec in `pipelines/*.yaml`, named `lakeprep_<name>`.

Adding a dataset is adding a YAML file; this file only turns specs into DAGs (see
`lakeprep_airflow.dag_factory`). A broken spec shows up as this file's import error,
naming the spec file and the field.

    wait_for_partition >> validate >> preprocess >> sample            (daily)
        >> wait_for_window >> check_drift >> fit_transform >> export_shards
        >> gpu_training_handoff                                       (window)
"""

from __future__ import annotations

from lakeprep_airflow.dag_factory import build_dag
from lakeprep_airflow.spec import discover_specs, load_spec

for _path in discover_specs():
    _dag = build_dag(load_spec(_path))
    globals()[_dag.dag_id] = _dag
