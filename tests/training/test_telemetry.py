from __future__ import annotations

import pytest
import torch

from lakeprep_train.telemetry import CommTimer, StepTelemetry, classify, summarize


def verdict(data=0.05, comm=0.0, memory=0.2, device="cpu"):
    return classify(
        utilisation=1 - data,
        data_share=data,
        comm_share=comm,
        memory_share=memory,
        device=device,
        world_size=2,
        prefetch=4,
    )[0]


def test_classification_thresholds():
    assert verdict(data=0.31) == "input-bound"
    assert verdict(data=0.2) == "input-bound"  # 80 % utilisation: under MLPerf Storage's 90 % line
    assert verdict(data=0.09) == "compute-bound"
    assert verdict(comm=0.35) == "communication-bound"
    assert verdict(memory=0.95) == "memory-bound"
    assert verdict(data=0.5, comm=0.5, memory=0.95) == "input-bound"


def test_recommendation_is_concrete():
    name, reason, recommendation = classify(
        utilisation=0.58,
        data_share=0.42,
        comm_share=0.0,
        memory_share=0.1,
        device="cuda",
        world_size=1,
        prefetch=2,
    )
    assert reason == (
        "accelerator utilisation is 58% (compute / step time), under MLPerf Storage's 90% line: "
        "waiting for data is 42% of step time"
    )
    assert "--prefetch (now 2)" in recommendation


def rank_telemetry(rank: int, *, data_s: float, compute_s: float, steps: int = 4) -> dict:
    """One rank's summary of ``steps`` equal steps after a warm-up step."""
    telemetry = StepTelemetry(torch.device("cpu"), rank=rank, world_size=2)
    telemetry.record(data_s=1.0, compute_s=1.0, comm_s=0.0, rows=32)  # warm-up, left out
    for _ in range(steps):
        telemetry.record(data_s=data_s, compute_s=compute_s, comm_s=0.0, rows=32)
    return telemetry.summary()


@pytest.mark.parametrize(
    ("data_s", "utilisation", "classification"),
    [(0.011, 0.89, "input-bound"), (0.009, 0.91, "compute-bound"), (0.02, 0.80, "input-bound")],
)
def test_a_rank_under_the_utilisation_line_makes_the_run_input_bound(data_s, utilisation, classification):
    """Compute / step time per rank; the run is input-bound when its worst rank is under 90 %."""
    busy = rank_telemetry(0, data_s=0.001, compute_s=0.099)  # 99 %
    other = rank_telemetry(1, data_s=data_s, compute_s=0.1 - data_s)
    assert busy["accelerator_utilisation"] == pytest.approx(0.99)
    assert other["accelerator_utilisation"] == pytest.approx(utilisation)
    report = summarize([busy, other], device="cuda", world_size=2, prefetch=4, comm_measure=None)
    assert report["classification"] == classification
    assert report["accelerator_utilisation"]["per_rank"] == pytest.approx([0.99, utilisation])
    assert report["accelerator_utilisation"]["target"] == 0.9
    assert [r["accelerator_utilisation"] for r in report["ranks"]] == pytest.approx([0.99, utilisation])
    assert report["evidence"]["accelerator_utilisation"] == pytest.approx(utilisation)
    assert report["evidence"]["data_share_rank"] == 1
    if classification == "input-bound":
        assert f"accelerator utilisation is {utilisation:.0%}" in report["reason"]


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
    starved = {
        **fast,
        "rank": 1,
        "shares": {**fast["shares"], "data": 0.6, "compute": 0.4},
        "accelerator_utilisation": 0.4,
    }
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
