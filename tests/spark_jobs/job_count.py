"""The Spark jobs a call runs, from the status tracker: how many passes a stage makes.

PySpark has no SparkListener; a job group (a thread-local property, so other tests' jobs
never count) and `statusTracker().getJobIdsForGroup` name exactly the jobs of the call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any


def spark_jobs(spark: Any, call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """(what `call()` returns, the call site of each Spark job it ran, in job order)."""
    sc = spark.sparkContext
    group = f"lakeprep-jobs-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, group)
    try:
        result = call()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    tracker = sc.statusTracker()
    sites = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        stages = [tracker.getStageInfo(s) for s in (info.stageIds if info else [])]
        sites.append(next((s.name for s in reversed(stages) if s), "?"))
    return result, sites
