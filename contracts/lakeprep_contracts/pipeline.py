"""The pipeline's names, for every runtime: its Spark stages in order and the window's outcomes.

A spec's DAG runs the daily stages once per day (one submission each, or fused into one)
and the window stages once per run over the days its window read; `wait_for_window` sorts
each of the window's days into one of the outcomes, which the manifest records.
"""

from __future__ import annotations

DAILY_STAGES = ("validate", "preprocess", "sample")  # a day's rows: prepared, profiled, written once
WINDOW_STAGES = ("fit_transform", "export_shards")  # a run: the fit from the days' statistics, the manifest
STAGES = (*DAILY_STAGES, *WINDOW_STAGES)  # the Spark stages, in pipeline order

# A window day is read (complete) or not, and why: its task failed, it never landed, or it
# is before the dataset's start date.
WINDOW_OUTCOMES = ("complete", "failed", "missing", "before_start")
WINDOW_KEYS = ("days", *WINDOW_OUTCOMES)  # the window record: its days, then each outcome's

TAG = "lakeprep"  # every lakeprep DAG's tag (the trigger guard finds lakeprep's DAGs by it)
