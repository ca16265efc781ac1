"""Where a single-node preparation outgrows a memory budget: searched, not interpolated.

Measurement 3 of issue 10 asks for the row count beyond which the pandas + scikit-learn
and the Polars versions (`benchmarks/single_node.py`) exceed a stated memory budget
(8 GiB) while lakeprep completes under it. The scale parts measure them at the scales of
`--rows` (1 M, 4 M, 16 M by default), which only bracket the crossing: here each engine is
measured again, on freshly generated data, at row counts chosen to close in on it, until
a row count under the budget and one over it are at most `tolerance` apart.

The search is a safeguarded secant: peak memory grows about linearly with rows, so the
next row count is where the line through the nearest point under the budget and the
nearest over it (or the two nearest on one side) meets the budget; it is kept inside the
bracket at least half the tolerance from either end, so that each step either lands on
the other side of the budget or narrows the bracket by that margin. Seeds are
earlier measurements (this run's single-node part, or `--crossover-seed` results), named
in the result so a reader can tell measured-here from carried-over.

    python -m benchmarks --only crossover --crossover-seed benchmarks/results.json
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

BUDGET_MB = 8 * 1024
TOLERANCE = 0.05  # the bracket's width at most this share of its upper end
STEP_ROWS = 100_000  # row counts are multiples of this (and the bracket never narrower)
MAX_STEPS = 5


def _round(rows: float) -> int:
    return max(STEP_ROWS, int(round(rows / STEP_ROWS)) * STEP_ROWS)


def bracket(points: dict[int, float], budget_mb: float) -> tuple[int | None, int | None]:
    """(the most rows measured under the budget below the fewest over it, the fewest over it)."""
    over = min((r for r, mb in points.items() if mb > budget_mb), default=None)
    under = max(
        (r for r, mb in points.items() if mb <= budget_mb and (over is None or r < over)), default=None
    )
    return under, over


def closed(under: int | None, over: int | None, tolerance: float = TOLERANCE) -> bool:
    return under is not None and over is not None and over - under <= max(STEP_ROWS, tolerance * over)


def next_rows(points: dict[int, float], budget_mb: float, tolerance: float = TOLERANCE) -> int:
    """The next row count to measure (see the module docstring). Needs one measured point."""
    if not points:
        raise ValueError("the search needs at least one measured point to start from")
    under, over = bracket(points, budget_mb)
    ordered = sorted(points)
    if under is not None and over is not None:
        (r0, m0), (r1, m1) = (under, points[under]), (over, points[over])
    elif len(ordered) >= 2:
        # One side only: the line through the two points nearest the budget's side.
        pair = ordered[-2:] if over is None else ordered[:2]
        (r0, m0), (r1, m1) = (pair[0], points[pair[0]]), (pair[1], points[pair[1]])
    else:
        r0 = ordered[0]
        # One point: memory proportional to rows.
        return _round(r0 * budget_mb / points[r0]) if points[r0] > 0 else _round(2 * r0)
    if m1 > m0:
        guess = r0 + (budget_mb - m0) * (r1 - r0) / (m1 - m0)
    else:  # memory did not grow with rows: widen towards the unmeasured side
        guess = 2 * r1 if over is None else r0 / 2
    if under is not None and over is not None:
        # At least a margin inside the bracket: when the line's estimate sits on a bracket
        # end (a measurement just landed next to the crossing), the next one steps the
        # margin past it, crossing the budget or narrowing the bracket to the tolerance.
        margin = max(STEP_ROWS, tolerance * over / 2)
        guess = min(max(guess, under + margin), over - margin)
    elif over is None:
        guess = max(guess, ordered[-1] * (1 + tolerance))
    else:
        guess = min(guess, ordered[0] * (1 - tolerance))
    rows = _round(guess)
    while rows in points:  # rounding landed on a measured count: the next free one inside
        rows += STEP_ROWS if over is None or rows + STEP_ROWS < over else -STEP_ROWS
        if rows <= 0:
            raise ValueError(f"no row count left to measure between the points {sorted(points)}")
    return rows


def search(
    measure: Callable[[int], dict[str, Any]],
    seeds: Iterable[tuple[int, float, str]],
    budget_mb: float = BUDGET_MB,
    tolerance: float = TOLERANCE,
    max_steps: int = MAX_STEPS,
) -> dict[str, Any]:
    """Measure `measure(rows)` (a dict with `peak_rss_mb`) until the crossing is bracketed.

    `seeds` are (rows, peak MB, where it was measured). Returns the steps taken, the seeds,
    the bracket (`under`, `over`: rows and MB, or None) and whether it closed.
    """
    points: dict[int, float] = {}
    seeded = []
    for rows, mb, source in seeds:
        points[int(rows)] = float(mb)
        seeded.append({"rows": int(rows), "peak_rss_mb": float(mb), "source": source})
    steps = []
    for _ in range(max_steps):
        if closed(*bracket(points, budget_mb), tolerance):
            break
        rows = next_rows(points, budget_mb, tolerance)
        measured = measure(rows)
        points[rows] = float(measured["peak_rss_mb"])
        steps.append({"rows": rows, **measured})
    under, over = bracket(points, budget_mb)
    return {
        "budget_mb": budget_mb,
        "tolerance": tolerance,
        "seeds": seeded,
        "steps": steps,
        "under": None if under is None else {"rows": under, "peak_rss_mb": points[under]},
        "over": None if over is None else {"rows": over, "peak_rss_mb": points[over]},
        "closed": closed(under, over, tolerance),
    }


def describe(result: dict[str, Any]) -> str:
    """`6,700,000 to 7,000,000 rows` or why there is no bracket."""
    under, over = result["under"], result["over"]
    if under and over:
        return f"{under['rows']:,} to {over['rows']:,} rows"
    if over is None:
        top = max([s["rows"] for s in result["steps"]] + [s["rows"] for s in result["seeds"]], default=0)
        return f"under the budget up to {top:,} rows"
    return f"over the budget already at {over['rows']:,} rows"


def width(result: dict[str, Any]) -> float:
    """The bracket's width as a share of its upper end (inf without a bracket)."""
    under, over = result["under"], result["over"]
    return (over["rows"] - under["rows"]) / over["rows"] if under and over else math.inf
