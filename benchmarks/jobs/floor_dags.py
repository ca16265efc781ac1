"""The DAG parse's floor: lakeprep's DAGs rebuilt from their shape with nothing of lakeprep.

`benchmarks/dag_parse.py --floor` writes the shape of the DAGs that `dags/lakeprep_datasets.py`
builds (`dag_parse.dag_shapes`: each DAG's id, schedule, Params with their schemas, task ids
and edges) to the JSON file named by `LAKEPREP_BENCH_DAG_SHAPES`, then parses this file the
way the DAG processor does: the same DAGs, tasks, dependencies and trigger-form Params, each
task an `EmptyOperator`. What this file costs is what Airflow spends on DAGs of that shape,
whatever lakeprep does. The Params are declared after the tasks, as lakeprep's DAG factory
declares them (`dag_factory.with_params`: no task carries a copy).
"""

from __future__ import annotations

import json
import os

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param

with open(os.environ["LAKEPREP_BENCH_DAG_SHAPES"], encoding="utf-8") as _f:
    _SHAPES = json.load(_f)

for _shape in _SHAPES:
    with DAG(
        _shape["dag_id"],
        schedule=_shape["schedule"],
        start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
        catchup=False,
    ) as _dag:
        _tasks = {task_id: EmptyOperator(task_id=task_id) for task_id in _shape["tasks"]}
        for _up, _down in _shape["edges"]:
            _tasks[_up] >> _tasks[_down]
    _dag.params = {
        name: Param(p["default"], description=p["description"], schema=p["schema"])
        for name, p in _shape["params"].items()
    }
    globals()[_dag.dag_id] = _dag
