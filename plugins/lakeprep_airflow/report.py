"""The run report: one self-contained HTML page with plots, from the day's collected summary.

    day = summary.collect(lake_root, "flights", "2013-01-03")
    html = report.build_html(day)          # what summary.write stores as report.html

Built from `summary.collect`'s data only (one reading of the lake, one source of truth
with summary.md): rows through each stage (what each removed and added, and whether it
balances) and the quarantine with its reasons, class
balance before and after sampling per split, drift per feature against the trailing
window (value against threshold), PCA's explained variance and the selection tests'
feature scores, the trainer's loss curve and its bottleneck breakdown. A part the run
does not have (no PCA configured, no model yet) is said in words, not an error.

The plots are matplotlib PNGs embedded as `data:` URIs, so the page needs nothing else
from the lake or the network (the Airflow UI shows it in a sandboxed iframe). matplotlib
is imported when a page is built, never at DAG parse time, and through its object API
(`Figure` + the Agg canvas), not pyplot: no global figure state, safe in threads
(https://matplotlib.org/stable/gallery/user_interfaces/web_application_server_sgskip.html).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakeprep_airflow import summary
from lakeprep_contracts import pipeline

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Section ids, in page order (the tests and the docs name them).
SECTIONS = {
    "rows": "Rows through each stage",
    "quarantine": "Quarantine",
    "class-balance": "Class balance",
    "drift": "Drift against the trailing window",
    "transform": "Transform: PCA and feature scores",
    "training": "Training",
}
WINDOW_STAGES = pipeline.WINDOW_STAGES
_STATUS_COLOURS = {"ok": "#4c9a2a", "drift": "#d1495b", "stop": "#d1495b"}


def build_html(day: dict[str, Any]) -> str:
    """The report page for one day's summary (`summary.collect`)."""
    parts = [
        _rows_section(day),
        _quarantine_section(day),
        _balance_section(day),
        _drift_section(day),
        _transform_section(day),
        _training_section(day),
    ]
    title = f"lakeprep {day['dataset']} {day['logical_date']}"
    run = f"run <code>{_e(day['run_id'])}</code>" if day.get("run_id") else "no export yet"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_e(title)}</title>",
            f"<style>{_CSS}</style></head><body>",
            f"<h1>{_e(title)}</h1>",
            f'<p class="meta">{run}; summary: <code>{_e(day.get("report"))}</code></p>',
            *parts,
            "</body></html>",
        ]
    )


# --------------------------------------------------------------------------- sections


def _section(key: str, *body: str) -> str:
    return f'<section id="{key}"><h2>{_e(SECTIONS[key])}</h2>\n' + "\n".join(body) + "\n</section>"


def _missing(text: str) -> str:
    return f'<p class="missing">{_e(text)}</p>'


def _rows_section(day: dict[str, Any]) -> str:
    stages = {s: r for s, r in day["stages"].items() if r is not None}
    absent = [s for s, r in day["stages"].items() if r is None]
    if not stages:
        return _section("rows", _missing("No stage has written its report for this day yet."))
    names = [f"{s} (window)" if s in WINDOW_STAGES else s for s in stages]

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        y = range(len(names))
        h = 0.2
        for i, (label, colour, value) in enumerate(
            (
                ("rows in", "#8da0cb", lambda r: r["rows_in"] or 0),
                ("rows out", "#66c2a5", lambda r: r["rows_out"] or 0),
                ("removed", "#fc8d62", lambda r: sum(r["removed"].values())),
                ("added", "#e78ac3", lambda r: sum(r["added"].values())),
            )
        ):
            values = [value(stages[s]) for s in stages]
            ax.barh([v + (i - 1.5) * h for v in y], values, height=h, label=label, color=colour)
        ax.set_yticks(list(y), names)
        ax.invert_yaxis()
        ax.set_xlabel("rows")
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize="small")

    table = _table(
        ["stage", "rows in", "rows out", "removed", "added", "balances"],
        [
            [
                n,
                r["rows_in"],
                r["rows_out"],
                summary.moves(r["removed"]),
                summary.moves(r["added"]),
                summary.balance_cell(r["unaccounted"]),
            ]
            for n, r in zip(names, stages.values(), strict=True)
        ],
    )
    note = (
        _missing("Not written yet: " + ", ".join(absent) + ".")
        if absent
        else "<p>The window stages read the whole trailing window, not only this day. Per stage, "
        "rows in = rows out + removed - added.</p>"
    )
    problems = [_missing("Does not balance: " + p) for p in day.get("rows_not_balanced") or []]
    return _section(
        "rows",
        _img(draw, "rows in, out, removed and added per stage", (7, 0.5 + 0.8 * len(names))),
        table,
        *problems,
        note,
    )


def _quarantine_section(day: dict[str, Any]) -> str:
    reasons = day.get("quarantine_reasons") or {}
    if not reasons:
        if day["stages"].get("validate") is None:
            return _section("quarantine", _missing("validate has not run for this day yet."))
        return _section("quarantine", "<p>No row was quarantined.</p>")
    items = sorted(reasons.items(), key=lambda kv: -kv[1])

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        ax.barh([k for k, _ in items], [v for _, v in items], color="#fc8d62")
        ax.invert_yaxis()
        ax.set_xlabel("rows quarantined")

    return _section(
        "quarantine",
        _img(draw, "quarantined rows per reason", (7, 0.6 + 0.4 * len(items))),
        _table(["reason", "rows"], items),
    )


def _balance_section(day: dict[str, Any]) -> str:
    body = []
    before, after = day.get("class_counts_before_sampling"), day.get("class_counts_after_sampling")
    b = day.get("class_balance")
    if not before and not b:
        return _section("class-balance", _missing("sample has not run for this day yet."))
    # A continuous label's counts are of its quantile bins, the strata of sampling; the
    # spec refuses balancing them, so the train split goes from sampled to augmented.
    continuous = summary.is_continuous(day)
    unit = "label bin" if continuous else "class"
    panels: list[tuple[str, dict[str, dict[str, int]]]] = []
    if before:
        panels.append(("the day (sample)", {"before sampling": before, "after sampling": after or {}}))
    if b:
        for split, steps in b["splits"].items():
            if split == "train":
                panels.append(
                    (
                        "train (window)",
                        {
                            "sampled": steps["sample"],
                            **({} if continuous else {"balanced": steps["balance"]}),
                            "augmented": steps["augment"],
                        },
                    )
                )
            else:
                panels.append((f"{split} (window)", {"sampled": steps["augment"]}))

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (title, steps) in zip(axes, panels, strict=True):
            classes = sorted({c for counts in steps.values() for c in counts})
            width = 0.8 / max(len(steps), 1)
            for i, (step, counts) in enumerate(steps.items()):
                ax.bar(
                    [j + i * width for j in range(len(classes))],
                    [counts.get(c, 0) for c in classes],
                    width=width,
                    label=step,
                )
            ax.set_xticks([j + width * (len(steps) - 1) / 2 for j in range(len(classes))], classes)
            ax.set_title(title, fontsize="medium")
            ax.set_xlabel(unit)
            ax.legend(fontsize="x-small")
        axes[0].set_ylabel("rows")

    body.append(_img(draw, f"{unit} counts before and after sampling per split", (3.2 * len(panels), 3.2)))
    rows = [["the day", "before sampling", before], ["the day", "after sampling", after]] if before else []
    if b:
        rows.append(["window", "before sampling", b["before_sampling"]])
        for split, steps in b["splits"].items():
            train_steps = ("sample", "augment") if continuous else ("sample", "balance", "augment")
            for step in train_steps if split == "train" else ("augment",):
                rows.append(
                    [
                        split,
                        {"sample": "sampled", "balance": "balanced", "augment": "augmented"}[step]
                        if split == "train"
                        else "as sampled",
                        steps[step],
                    ]
                )
        if continuous:
            words = summary.strata_words(day)
            body.append(
                f"<p>{_e(words[0].upper() + words[1:])}. "
                f"Train only: augment {_e(b['augment'])} ({_e(b['synthetic'])} synthetic rows); never "
                "balanced or weighted; validation and test are never augmented.</p>"
            )
        else:
            body.append(
                f"<p>Train only: {_e(b['strategy'])} (target ratio {_e(b['target_ratio'])}), augment "
                f"{_e(b['augment'])} ({_e(b['synthetic'])} synthetic rows), class weights "
                f"{_e(b['class_weights'])}; validation and test are never balanced or augmented.</p>"
            )
    else:
        body.append(_missing("export_shards has not run yet: no per-split balance of the window."))
    body.append(_table(["split", "step", f"{unit} counts"], rows))
    return _section("class-balance", *body)


def _shift_cell(shift: dict[str, Any] | None) -> str:
    """`mean +0.512 (0.090, 0.254)`: a feature's largest shift beside its noise and threshold."""
    if not shift:
        return "-"
    return f"{shift['measure']} {shift['value']:+.3f} ({shift['noise']:.3f}, {shift['threshold']:.3g})"


def _drift_section(day: dict[str, Any]) -> str:
    d = day.get("drift")
    if not d:
        return _section("drift", _missing("check_drift has not run for this day yet."))
    features = d["features"]
    measured = {n: f for n, f in features.items() if f["value"] is not None}
    head = f"<p>Against {d['reference_days']} earlier day(s) of the window: <b>{_e(d['status'])}</b>.</p>"
    table = _table(
        ["feature", "metric", "value", "noise", "threshold", "shift (noise, threshold)", "status"],
        [
            [
                n,
                f["metric"],
                "-" if f["value"] is None else f"{f['value']:.4f}",
                "-" if f.get("noise") is None else f"{f['noise']:.4f}",
                f"{f['threshold']:.4g}",
                _shift_cell(f.get("shift")),
                f["status"],
            ]
            for n, f in features.items()
        ],
    )
    if not measured:
        return _section(
            "drift", head, _missing("No feature has a drift value (no earlier day to compare with)."), table
        )
    names = list(measured)

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        values = [measured[n]["value"] for n in names]
        ax.barh(names, values, color=[_STATUS_COLOURS.get(measured[n]["status"], "#999999") for n in names])
        ax.scatter(
            [measured[n]["threshold"] for n in names],
            names,
            marker="|",
            s=300,
            color="black",
            label="threshold",
            zorder=3,
        )
        ax.set_yticks(range(len(names)), [f"{n} ({measured[n]['metric']})" for n in names])
        ax.invert_yaxis()
        positive = [v for v in (*values, *(measured[n]["threshold"] for n in names)) if v > 0]
        if positive and max(positive) / min(positive) > 100:  # PSI of 4 beside a JSD of 0.01
            ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel("drift value (bar) vs threshold (|); red: over the threshold")
        ax.legend(loc="lower right", fontsize="small")

    return _section(
        "drift",
        head,
        _img(draw, "drift per feature against its threshold", (7, 0.6 + 0.35 * len(names))),
        table,
    )


def _transform_section(day: dict[str, Any]) -> str:
    t = day.get("transform")
    if not t:
        return _section("transform", _missing("fit_transform has not run for this day yet."))
    body = [
        f"<p>Fitted on {_e(t['fitted_on_rows'])} train rows of the window: <code>{_e(t['uri'])}</code>.</p>"
    ]
    pca = t.get("pca")
    if pca:
        ev = pca["explained_variance"]

        def draw_pca(fig: Figure) -> None:
            ax = fig.subplots()
            xs = range(1, len(ev) + 1)
            ax.bar(xs, ev, color="#8da0cb", label="explained variance")
            cumulative = [sum(ev[:i]) for i in xs]
            ax.plot(xs, cumulative, marker="o", color="#333333", label="cumulative")
            if pca.get("variance_target"):
                ax.axhline(pca["variance_target"], linestyle="--", color="#d1495b", label="variance target")
            ax.set_xticks(list(xs), [f"pc{i}" for i in xs])
            ax.set_ylim(0, 1.05)
            ax.set_ylabel("share of the inputs' train variance")
            ax.legend(fontsize="small")

        body.append(f"<h3>PCA: {pca['k']} component(s), {sum(ev):.1%} of the variance</h3>")
        body.append(_img(draw_pca, "PCA explained variance per component", (6, 3.2)))
    else:
        body.append(_missing("No PCA configured for this dataset (pca_components and pca_variance are off)."))
    scores = [s for s in t.get("selection_scores") or [] if s["statistic"] is not None]
    if scores:
        steps = list(dict.fromkeys(s["step"] for s in scores))

        def draw_scores(fig: Figure) -> None:
            axes = fig.subplots(1, len(steps), squeeze=False)[0]
            for ax, step in zip(axes, steps, strict=True):
                mine = [s for s in scores if s["step"] == step]
                ax.barh(
                    [s["name"] for s in mine],
                    [s["statistic"] for s in mine],
                    color=["#66c2a5" if s["kept"] else "#bbbbbb" for s in mine],
                )
                ax.invert_yaxis()
                ax.set_title(f"{step} ({mine[0]['test']})", fontsize="medium")
                ax.set_xlabel("statistic; grey: left out")

        n = max(sum(1 for s in scores if s["step"] == step) for step in steps)
        body.append("<h3>Feature scores</h3>")
        body.append(_img(draw_scores, "feature selection scores", (5 * len(steps), 0.8 + 0.35 * n)))
        body.append(
            _table(
                ["step", "feature", "test", "statistic", "p-value", "kept", "reason"],
                [
                    [
                        s["step"],
                        s["name"],
                        s["test"],
                        f"{s['statistic']:.4g}",
                        "-" if s["p_value"] is None else f"{s['p_value']:.3g}",
                        "yes" if s["kept"] else "no",
                        s["reason"] or "",
                    ]
                    for s in t["selection_scores"]
                ],
            )
        )
    else:
        body.append(_missing("No feature selection scores (selection is off for this dataset)."))
    if t.get("dropped"):
        body.append(_table(["left out", "reason"], [[x["name"], x["reason"]] for x in t["dropped"]]))
    return _section("transform", *body)


def _training_section(day: dict[str, Any]) -> str:
    t = day.get("training")
    if not t:
        return _section(
            "training", _missing("No model yet: the trainer has not written metrics.json for this day.")
        )
    line = summary.scores_line(t)
    body = [f"<p>{_e(line[0].upper() + line[1:])}.</p>"]
    history = [h for h in t.get("history") or [] if h["train_loss"] is not None]
    if history:

        def draw_loss(fig: Figure) -> None:
            ax = fig.subplots()
            epochs = [h["epoch"] for h in history]
            ax.plot(epochs, [h["train_loss"] for h in history], marker="o", label="train loss")
            val = [(h["epoch"], h["validation_loss"]) for h in history if h["validation_loss"] is not None]
            if val:
                ax.plot([e for e, _ in val], [v for _, v in val], marker="s", label="validation loss")
            ax.set_xticks(epochs)
            ax.set_xlabel("epoch")
            ax.set_ylabel("loss")
            ax.legend(fontsize="small")

        body.append("<h3>Loss per epoch</h3>")
        body.append(_img(draw_loss, "train and validation loss per epoch", (6, 3.2)))
    else:
        body.append(_missing("The trainer recorded no per-epoch history."))
    shares = t.get("shares")
    if shares:

        def draw_shares(fig: Figure) -> None:
            ax = fig.subplots()
            left = 0.0
            for key, colour in (("data", "#fc8d62"), ("compute", "#66c2a5"), ("comm", "#8da0cb")):
                share = shares.get(key) or 0.0
                ax.barh(["step time"], [share], left=left, color=colour, label=f"{key} {share:.0%}")
                left += share
            if t.get("memory_share") is not None:
                ax.barh(
                    ["peak memory"],
                    [t["memory_share"]],
                    color="#e78ac3",
                    label=f"memory {t['memory_share']:.0%}",
                )
            ax.set_xlim(0, 1)
            ax.set_xlabel("share")
            ax.legend(fontsize="small", ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.35))

        peak = t.get("peak_memory_bytes")
        device = t.get("device_memory_bytes")
        memory = (
            f"peak memory {peak / 2**20:.0f} MiB of {device / 2**30:.1f} GiB ({t.get('device')})"
            if peak is not None and device
            else "peak memory not recorded"
        )
        body.append(f"<h3>Bottleneck: {_e(t['bottleneck'])}</h3>")
        body.append(f"<p>{_e(t['bottleneck_reason'])}; {_e(memory)}; {_e(_samples(t))}.</p>")
        body.append(
            _img(draw_shares, "data, compute and communication shares of step time, peak memory", (7, 2.4))
        )
    else:
        body.append(_missing("No telemetry.json beside the model: no bottleneck breakdown."))
    return _section("training", *body)


# --------------------------------------------------------------------------- helpers


def _img(draw: Callable[[Figure], None], alt: str, size: tuple[float, float]) -> str:
    """A figure drawn by `draw`, as an embedded PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig)
    buf = io.BytesIO()
    # No Software/creation metadata: the same data gives the same bytes.
    fig.savefig(buf, format="png", metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _table(header: list[str], rows: list) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _samples(t: dict[str, Any]) -> str:
    rate = t.get("samples_per_second")
    return (f"{rate:.0f} samples/s" if rate is not None else "throughput not recorded") + (
        f", {t['precision']}" if t.get("precision") else ""
    )


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; max-width: 70rem; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; border-bottom: 1px solid #ddd; }
h3 { font-size: 1rem; } img { max-width: 100%; display: block; margin: 0.5rem 0; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: left; }
.missing { color: #8a6d3b; background: #fcf8e3; padding: 0.4rem 0.6rem; }
.meta { color: #555; font-size: 0.9rem; }
"""
