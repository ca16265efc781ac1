from __future__ import annotations

import torch

from lakeprep_train.telemetry import CommTimer, StepTelemetry, classify, summarize


def verdict(data=0.1, comm=0.0, memory=0.2, device="cpu"):
    return classify(
        data_share=data, comm_share=comm, memory_share=memory, device=device, world_size=2, prefetch=4
    )[0]


def test_classification_thresholds():
    assert verdict(data=0.31) == "input-bound"
    assert verdict(data=0.29) == "compute-bound"
    assert verdict(comm=0.35) == "communication-bound"
    assert verdict(memory=0.95) == "memory-bound"
    assert verdict(data=0.5, comm=0.5, memory=0.95) == "input-bound"


def test_recommendation_is_concrete():
    name, reason, recommendation = classify(
        data_share=0.42, comm_share=0.0, memory_share=0.1, device="cuda", world_size=1, prefetch=2
    )
    assert reason == "waiting for data is 42% of step time (> 30%)"
    assert "--prefetch (now 2)" in recommendation


def test_summary_classifies_by_the_slowest_rank():
    telemetry = StepTelemetry(torch.device("cpu"))
    telemetry.record(data_s=2.0, compute_s=0.5, comm_s=0.0, rows=32)  # warm-up: lazy imports, first open
    for _ in range(4):
        telemetry.record(data_s=0.01, compute_s=0.09, comm_s=0.0, rows=32)
    fast = telemetry.summary()
    assert fast["steps"] == 5 and fast["rows"] == 160
    assert fast["warmup_steps"] == 1 and fast["warmup_s"] == 2.5
    assert abs(fast["shares"]["data"] - 0.1) < 1e-9
    assert fast["peak_memory_bytes"] > 0 and 0 < fast["memory_share"] < 1
    starved = {**fast, "rank": 1, "shares": {**fast["shares"], "data": 0.6}}
    report = summarize([fast, starved], device="cpu", world_size=2, prefetch=4, comm_measure=None)
    assert report["classification"] == "input-bound"
    assert report["evidence"]["data_share_rank"] == 1
    assert report["steps_per_rank"] == [5, 5]


def test_comm_timer_merges_overlapping_buckets():
    timer = CommTimer()
    timer._intervals = [(0.0, 1.0), (0.5, 1.5), (3.0, 3.5)]
    assert timer.take() == 2.0
    assert timer.take() == 0.0
    assert timer.buckets == 3
