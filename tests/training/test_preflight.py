"""The checks before any process group: environment, devices, memory, every rank's plan."""

from __future__ import annotations

import json

import pytest
import torch

from lakeprep_train.manifest import load_manifest
from lakeprep_train.model import TabularMLP
from lakeprep_train.preflight import (
    HEADROOM,
    DistributedEnv,
    PreflightError,
    check_memory,
    check_run,
    estimate_memory,
    main,
    resolve_device,
)


def test_environment_of_torchrun_is_read_and_checked():
    env = DistributedEnv.from_environ(
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    )
    assert env == DistributedEnv(rank=3, world_size=4, local_rank=1, local_world_size=2)
    # Without LOCAL_WORLD_SIZE (plain python), every rank is on this host.
    assert DistributedEnv.from_environ({}).local_world_size == 1
    with pytest.raises(PreflightError, match=r"LOCAL_RANK=2 must be in \[0, LOCAL_WORLD_SIZE=2\)"):
        DistributedEnv.from_environ(
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}
        )
    with pytest.raises(PreflightError, match="WORLD_SIZE='two' must be an integer"):
        DistributedEnv.from_environ({"WORLD_SIZE": "two"})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a host without CUDA")
def test_cuda_asked_for_without_cuda_is_refused():
    with pytest.raises(PreflightError, match="torch sees no CUDA device"):
        resolve_device("cuda", DistributedEnv(0, 1, 0, 1))
    assert resolve_device("auto", DistributedEnv(0, 1, 0, 1)) == torch.device("cpu")


def test_memory_estimate_grows_with_the_batch_and_names_its_parts(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    model = TabularMLP(manifest.features, 2)
    small = estimate_memory(manifest, model, 32, prefetch=4)
    large = estimate_memory(manifest, model, 3200, prefetch=4)
    assert small.parameters == sum(p.numel() for p in model.parameters())
    assert small.state_bytes == 16 * small.parameters
    # 1 float32 numeric + 1 int32 categorical + 4 int32 tokens + the int64 label = 32 bytes a row.
    assert small.batch_bytes == 32 * 32 and small.buffered_batches == 5
    assert large.activation_bytes == 100 * small.activation_bytes
    assert large.total_bytes > small.total_bytes
    assert "parameters" in small.describe() and "5 batches" in small.describe()


def test_a_step_that_cannot_fit_is_refused_naming_both_numbers(export_two_ranks):
    manifest = load_manifest(str(export_two_ranks))
    model = TabularMLP(manifest.features, 2)
    env = DistributedEnv(0, 1, 0, 1)
    fits = check_memory(estimate_memory(manifest, model, 32, prefetch=4), torch.device("cpu"), env)
    assert fits["free_bytes"] > fits["estimate"]["total_bytes"] * HEADROOM
    huge = estimate_memory(manifest, model, 10**9, prefetch=4)  # a billion rows per batch
    with pytest.raises(PreflightError, match=r"needs about .* GiB .* but host memory .* has .* free"):
        check_memory(huge, torch.device("cpu"), env)


def test_check_run_plans_every_rank_for_the_world_size(export_two_ranks, capsys):
    report = check_run(
        load_manifest(str(export_two_ranks)), world_size=3, nproc_per_node=3, device_choice="cpu", prefetch=2
    )
    assert report["world_size"] == 3 and report["device"] == "cpu"
    assert report["plan"]["rows_per_rank"] == 100  # 300 train rows over 3 ranks
    assert main(["--manifest", str(export_two_ranks), "--world-size", "2", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["world_size"] == 2
    # More ranks than train rows: refused before any launch, with the manifest field.
    assert main(["--manifest", str(export_two_ranks), "--world-size", "301", "--device", "cpu"]) == 2
