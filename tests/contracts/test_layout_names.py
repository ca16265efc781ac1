"""The lake's and the model folder's file names (`lakeprep_contracts.layout`) and the
pipeline's names (`lakeprep_contracts.pipeline`): spelled in contracts/ only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from lakeprep_contracts import layout, pipeline

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("benchmarks", "dags", "hadoop", "ops", "plugins", "spark_jobs", "training")
# The file names a reader or writer would otherwise spell: any string literal equal to one.
FILE_NAMES = {
    value: f"layout.{name}"
    for name, value in vars(layout).items()
    if name.isupper() and isinstance(value, str) and (value.startswith("_") or "." in value)
}
# The stage lists and the window's outcomes: a tuple or list literal with the same elements.
SEQUENCES = {
    "pipeline.STAGES": pipeline.STAGES,
    "pipeline.DAILY_STAGES": pipeline.DAILY_STAGES,
    "pipeline.WINDOW_STAGES": pipeline.WINDOW_STAGES,
    "pipeline.WINDOW_OUTCOMES": pipeline.WINDOW_OUTCOMES,
}


def _product_modules() -> Iterator[tuple[Path, ast.Module]]:
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            relative = path.relative_to(REPO)
            if not any(part.startswith(".") for part in relative.parts):
                yield relative, ast.parse(path.read_text(encoding="utf-8"), str(relative))


def _spellings(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in FILE_NAMES:
            found.add(FILE_NAMES[node.value])
        if isinstance(node, ast.Tuple | ast.List) and len(node.elts) >= 2:
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found |= {name for name, known in SEQUENCES.items() if tuple(values) == tuple(known)}
    return found


def test_the_names_are_spelled_in_contracts_only():
    elsewhere = {str(path): sorted(found) for path, tree in _product_modules() if (found := _spellings(tree))}
    assert elsewhere == {}, "read these from lakeprep_contracts (layout, pipeline) instead"


def test_the_scan_finds_each_kind_of_spelling():
    source = """
done = path / "_SUCCESS"
outputs = ("metrics.json", "model.pt")
STAGES = ("validate", "preprocess", "sample")
outcomes = ["complete", "failed", "missing", "before_start"]
fine = ("validate", "sample")
"""
    assert _spellings(ast.parse(source)) == {
        "layout.SUCCESS",
        "layout.METRICS",
        "layout.MODEL_WEIGHTS",
        "pipeline.DAILY_STAGES",
        "pipeline.WINDOW_OUTCOMES",
    }


def test_the_model_folder_holds_the_trainers_outputs():
    assert set(layout.MODEL_FILES) == {
        layout.METRICS,
        layout.TELEMETRY,
        layout.MODEL_WEIGHTS,
        layout.TRANSFORM,
    }


def test_the_stages_are_the_daily_then_the_window_ones():
    assert pipeline.STAGES == (*pipeline.DAILY_STAGES, *pipeline.WINDOW_STAGES)
