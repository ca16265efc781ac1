"""lakeprep: two DAGs per dataset spec in `pipelines/*.yaml`: `lakeprep_<name>`, `lakeprep_<name>_train`.

Adding a dataset is adding a YAML file; this file only turns specs into DAGs (see
`lakeprep_airflow.dag_factory`). A broken spec shows up as this file's import error,
naming the spec file and the field.

    wait_for_partition >> validate >> preprocess >> sample            (daily)
        >> wait_for_window >> check_drift >> fit_transform >> export_shards
        >> gpu_training_handoff                                       (window)

    gpu_training_handoff      (lakeprep_<name>_train: scheduled on the export's Asset,
                               retrains on an existing export without Spark)

A spec with `spark.fuse_stages` runs the daily stages as one task (`prepare_day`) and
the window stages as another (`fit_and_export`), one spark-submit each.
"""

from __future__ import annotations

from lakeprep_airflow.dag_factory import build_dags
from lakeprep_airflow.spec import discover_specs, load_spec

for _path in discover_specs():
    for _dag in build_dags(load_spec(_path)):
        globals()[_dag.dag_id] = _dag
