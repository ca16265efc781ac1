"""docs/TRAINING.md's example of a training loop of one's own, run as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.training import prepared_export

DOC = Path(__file__).resolve().parents[2] / "docs" / "TRAINING.md"


def example() -> str:
    found = re.search(r"<!-- example: read-export .*?-->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found, "docs/TRAINING.md lost its read-export example"
    return found.group(1)


def test_the_read_export_example_runs_on_a_prepared_export(tmp_path, monkeypatch):
    _, prepared = prepared_export.write_pair(tmp_path)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    scope: dict = {"MANIFEST": str(prepared)}
    exec(compile(example(), str(DOC), "exec"), scope)
    train, batch = scope["train"], scope["batch"]
    assert (train.rank, train.world_size) == (1, 2)
    assert batch.numeric.shape[1] == len(scope["manifest"].features_with_role("numeric"))
    assert scope["targets"].dtype.is_floating_point is False
    assert scope["epoch"] == 1
