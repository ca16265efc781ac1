"""lakeprep: two DAGs per dataset spec in `pipelines/*.yaml`: `lakeprep_<name>`, `lakeprep_<name>_train`.

Adding a dataset is adding a YAML file; this file only turns specs into DAGs (see
`lakeprep_airflow.dag_factory`). A broken spec breaks its own DAGs only: they stay under
their ids as stand-ins whose one task fails with the error, naming the spec file and the
field (docs/SPEC.md#a-broken-spec); the other specs' DAGs load as usual.

The tasks, their order and where each runs (a spark-submit or the Airflow worker) are
`lakeprep_airflow.dag_factory`'s, drawn in docs/PIPELINE.md.
"""

from __future__ import annotations

# Named here so the DAG processor imports them once, in its long-lived parent, rather than in
# the child it forks for every parse: `[dag_processor] parsing_pre_import_modules` (on by
# default) imports the `airflow.*` modules a DAG file imports at its top level before the
# fork (airflow/dag_processing/processor.py `_pre_import_airflow_modules`). The lakeprep
# operators and sensors build on the first two (the Spark provider pulls in requests and
# urllib3); Airflow's serializer imports the last two in every child to look for cross-DAG
# dependencies (serialization/serialized_objects.py `_DependencyDetector`).
import airflow.providers.apache.spark.operators.spark_submit  # noqa: F401
import airflow.providers.standard.operators.trigger_dagrun  # noqa: F401
import airflow.providers.standard.sensors.external_task  # noqa: F401
import airflow.sdk.bases.sensor  # noqa: F401

from lakeprep_airflow.dag_factory import dags_for_spec
from lakeprep_airflow.locations import cache_dir
from lakeprep_airflow.spec import discover_specs

for _path in discover_specs():
    # Expression checks passed before are not rerun at every parse (`load_spec`); a task
    # that starts and `spec_check` run them all.
    for _dag in dags_for_spec(_path, checks_cache=cache_dir()):
        globals()[_dag.dag_id] = _dag
