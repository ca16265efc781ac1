"""The run summary: what happened to the data of one or more days, read from the lake.

    python -m lakeprep_airflow.summary --lake file://$PWD/.lake --dataset flights \
        --from 2013-01-01 --to 2013-01-03

Reads each stage's `_lakeprep_report.json`, `check_drift`'s `drift.json`, the export's
`manifest.json` and the trainer's `metrics.json`; prints rows through each stage, each
row naming what its stage removed and added (quarantined, sampled out, undersampled,
oversampled, synthetic, the rank remainder dropped or padded) and whether rows in = rows
out + removed - added holds, the text a tokenizer file cuts at `max_tokens` per split,
class balance before and after sampling, the window's class
balance per split through sampling, train-only balancing and augmentation (the export's
`sampling.json`), drift per feature against the trailing window, the fitted transform
(where it is, what it fitted on, what it left out), the window's days, the shards written,
the trainer's metrics against the training split's majority-class baseline, and where
the manifest and model are. A continuous label (`transform.json`'s `label.type`) is shown
as what it is: its quantile bins are the strata of sampling (never balanced or weighted),
the transform's standardisation of its value, and the trainer's MAE, RMSE and R²
against predicting the train mean. Also writes the same summary as `summary.json` and
`summary.md` under `<lake>/reports/<dataset>/dt=<date>/`, and `report.html`, the same
data with plots (`lakeprep_airflow.report`; the pipeline's `write_report` task writes all
three at the end of each run).

A stage row that does not balance says so in its `balances` cell (`unaccounted` in
summary.json), and every problem, also an export whose moves disagree with its class
counts in `sampling.json`, is listed under the table as `DOES NOT BALANCE: ...` and in
summary.json as `rows_not_balanced`. The summary is still written: it is where the
problem shows; the stages' outputs are already committed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from lakeprep_airflow import lake_fs
from lakeprep_airflow.spec import REPORT_NAME, STAGES, lake_uri
from lakeprep_contracts import labels, layout, pipeline

REPORT_HTML = "report.html"  # beside summary.md; the Airflow UI's Report tab serves it

# What a stage's report says it did to rows besides passing them on, in table order:
# (report key, name in the summary, +1 added or -1 removed). Per stage, rows in = rows out
# + removed - added; `collect` checks it.
ROW_MOVES = (
    ("rows_quarantined", "quarantined", -1),  # validate; preprocess: duplicates (their reasons)
    ("rows_sampled_out", "sampled out", -1),  # sample
    ("rows_superseded", "superseded by a later day", -1),  # export_shards: an id read once
    ("rows_undersampled", "undersampled", -1),  # export_shards, train only
    ("rows_oversampled", "oversampled", +1),
    ("rows_synthetic", "synthetic", +1),
    ("rows_dropped_for_balance", "rank remainder dropped", -1),  # equal rows per rank
    ("rows_padded_for_balance", "rank remainder padded", +1),
)


def _read_json(fs: lake_fs.LakeFS, path: str) -> dict[str, Any] | None:
    return json.loads(fs.read_bytes(path)) if fs.exists(path) else None


def collect(
    lake_root: str, dataset: str, ds: str, *, webhdfs_conn_id: str = "webhdfs_default"
) -> dict[str, Any]:
    """Everything the summary shows for one day, as plain data."""
    fs, _ = lake_fs.resolve(lake_root, webhdfs_conn_id=webhdfs_conn_id)

    def path_of(stage: str, name: str) -> str:
        return lake_fs.join(lake_fs.resolve(lake_uri(lake_root, stage, dataset, ds))[1], name)

    reports = {s: _read_json(fs, path_of(s, REPORT_NAME)) for s in STAGES}
    manifest = _read_json(fs, path_of("export_shards", layout.MANIFEST))
    metrics = _read_json(fs, path_of(layout.MODELS, layout.METRICS))
    telemetry = _read_json(fs, path_of(layout.MODELS, layout.TELEMETRY))
    drift = _read_json(fs, path_of("check_drift", layout.DRIFT))
    sampling = _read_json(fs, path_of("export_shards", layout.SAMPLING))
    fit = reports["fit_transform"] or {}
    # The fitted document itself (PCA's explained variance, selection scores): report.html.
    transform = _read_json(fs, path_of("fit_transform", layout.TRANSFORM)) if fit else None
    return {
        "dataset": dataset,
        "logical_date": ds,
        "run_id": (manifest or {}).get("run_id"),
        "stages": {s: _stage_view(r) for s, r in reports.items()},
        "rows_not_balanced": _rows_not_balanced(reports, sampling),
        "quarantine_reasons": {
            **(reports["validate"] or {}).get("quarantine_reasons", {}),
            **(reports["preprocess"] or {}).get("quarantine_reasons", {}),
        },
        # Which reference tables the day joined: a dated snapshot, or a plain folder (null).
        "reference_snapshots": (reports["preprocess"] or {}).get("reference_snapshots") or {},
        # Per text of a tokenizer file: rows and tokens its max_tokens cut, per split (sample).
        "text_truncation": (reports["sample"] or {}).get("text_truncation") or {},
        "class_counts_before_sampling": (reports["sample"] or {}).get("class_counts_before"),
        "class_counts_after_sampling": (reports["sample"] or {}).get("class_counts_after"),
        "class_balance": _balance_view(sampling),
        # What the label is, as the window's fit recorded it (None before the fit).
        "label": _label_view(transform),
        "drift": _drift_view(drift),
        "transform": (
            {
                # Where it was fitted (the export and the model folder hold copies).
                "uri": layout.join(lake_uri(lake_root, "fit_transform", dataset, ds), layout.TRANSFORM),
                "fitted_on_rows": fit.get("fitted_on_rows"),
                "vocabulary_sizes": fit.get("vocabulary_sizes", {}),
                "dropped": fit.get("dropped", []),
                "constant_numerics": fit.get("constant_numerics", []),
                **_fitted_view(transform),
            }
            if fit
            else None
        ),
        "window": (manifest or {}).get("window"),
        "shards": {
            split: {"shards": len(v["shards"]), "rows": v["rows"], "plan": v["plan"]}
            for split, v in (manifest or {}).get("splits", {}).items()
        },
        "source_partitions": len((manifest or {}).get("source_partitions", [])),
        "training": _training_view(metrics, telemetry),
        "manifest": lake_uri(lake_root, "export_shards", dataset, ds) + "/manifest.json"
        if manifest
        else None,
        # The day's prepared rows, written once by sample (lakeprep_jobs.day_shards).
        "day_shards": layout.join(lake_uri(lake_root, "sample", dataset, ds), layout.DAY_SHARDS)
        if reports.get("sample")
        else None,
        "shard_columns": (manifest or {}).get("shard_columns", "encoded"),
        "model": lake_uri(lake_root, layout.MODELS, dataset, ds) + "/model.pt" if metrics else None,
        "report": lake_uri(lake_root, layout.REPORTS, dataset, ds) + "/summary.md",
        "report_html": lake_uri(lake_root, layout.REPORTS, dataset, ds) + "/" + REPORT_HTML,
    }


def _stage_view(report: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rows in and out of a stage, what it removed and added (the moves its report names),
    and `unaccounted`: rows in - rows out - removed + added, 0 when the report balances."""
    if not report:
        return None
    moved = {key: (name, sign, int(report[key])) for key, name, sign in ROW_MOVES if key in report}
    removed = {name: n for name, sign, n in moved.values() if sign < 0}
    added = {name: n for name, sign, n in moved.values() if sign > 0}
    rows_in, rows_out = report.get("rows_in"), report.get("rows_out")
    unaccounted = (
        None
        if rows_in is None or rows_out is None
        else rows_in - rows_out - sum(removed.values()) + sum(added.values())
    )
    return {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "removed": removed,
        "added": added,
        "unaccounted": unaccounted,
    }


def _rows_not_balanced(
    reports: dict[str, dict[str, Any] | None], sampling: dict[str, Any] | None
) -> list[str]:
    """Why the stage table does not balance, one line per problem (empty: it does).

    Each stage's rows in must equal rows out + removed - added. The export's moves are also
    checked against its class counts through balancing (sampling.json, train only): the
    window's rows as sampled, and the rows balancing removed or added per class.
    """
    problems = []
    for stage, report in reports.items():
        view = _stage_view(report)
        if view is None or view["unaccounted"] == 0:
            continue
        if view["unaccounted"] is None:
            problems.append(f"{stage}: its {REPORT_NAME} has no rows_in or rows_out")
            continue
        problems.append(
            f"{stage}: rows in {view['rows_in']} != rows out {view['rows_out']} + removed "
            f"{sum(view['removed'].values())} - added {sum(view['added'].values())}: "
            f"{view['unaccounted']} row(s) unaccounted for in its {REPORT_NAME}"
        )
    export = reports.get("export_shards")
    if export and sampling:
        steps = {s["step"]: s for s in sampling["steps"]}
        sampled, balanced = steps["sample"]["splits"]["train"], steps["balance"]["splits"]["train"]
        augmented = steps["augment"]["splits"]["train"]
        expected = {
            # The sample step counts the window's rows read once (superseded ones left out).
            "rows_in": sum(steps["sample"]["class_counts"].values()) + export.get("rows_superseded", 0),
            "rows_undersampled": sum(max(0, n - balanced.get(c, 0)) for c, n in sampled.items()),
            "rows_oversampled": sum(max(0, n - sampled.get(c, 0)) for c, n in balanced.items()),
            "rows_synthetic": sum(n - balanced.get(c, 0) for c, n in augmented.items()),
        }
        for key, n in expected.items():
            if export.get(key, 0) != n:
                problems.append(
                    f"export_shards: {key} {export.get(key, 0)} in its {REPORT_NAME}, "
                    f"{n} from the class counts of {layout.SAMPLING}"
                )
    return problems


def _fitted_view(transform: dict[str, Any] | None) -> dict[str, Any]:
    """PCA's explained variance and the selection tests' scores from transform.json (None: off)."""
    transform = transform or {}
    pca = transform.get("pca")
    selection = transform.get("selection") or {}
    return {
        "pca": {k: pca[k] for k in ("k", "variance_target", "explained_variance", "outputs")}
        if pca
        else None,
        "selection_scores": [
            {
                "step": step,
                **{k: score.get(k) for k in ("name", "test", "statistic", "p_value", "kept", "reason")},
            }
            for step in ("variance_threshold", "univariate")
            for score in (selection.get(step) or {}).get("scores", [])
        ],
    }


def _label_view(transform: dict[str, Any] | None) -> dict[str, Any] | None:
    """The label from transform.json: its classes (and names), or a continuous label's bins
    and the standardisation of its value (lakeprep_contracts.labels)."""
    if not transform:
        return None
    label = transform["label"]
    fitted = labels.fitted_target(label)
    if fitted is None:
        return {
            "column": label["column"],
            "type": "classes",
            "classes": label["classes"],
            **({"names": label["names"]} if "names" in label else {}),
        }
    return {
        "column": label["column"],
        "type": labels.CONTINUOUS,
        "bins": len(label["classes"]),
        "target": {k: fitted[k] for k in ("rows", "mean", "std")},
    }


def is_continuous(day: dict[str, Any]) -> bool:
    """Whether the day's label is a continuous one (its bins are strata, not classes)."""
    return (day.get("label") or {}).get("type") == labels.CONTINUOUS


def _balance_view(sampling: dict[str, Any] | None) -> dict[str, Any] | None:
    """Class counts per split after each step of the export (sampling.json), for the summary."""
    if not sampling:
        return None
    steps = {s["step"]: s for s in sampling["steps"]}
    return {
        "before_sampling": steps["before_sampling"]["class_counts"],
        "splits": {
            split: {name: steps[name]["splits"][split] for name in ("sample", "balance", "augment")}
            for split in layout.SPLITS
        },
        "strategy": sampling["balance"]["strategy"],
        "target_ratio": sampling["balance"]["target_ratio"],
        "augment": sampling["balance"]["augment"],
        "synthetic": sum(sampling["synthetic"]["train"].values()),
        "class_weights": sampling["class_weights"],
    }


def _drift_view(drift: dict[str, Any] | None) -> dict[str, Any] | None:
    if not drift:
        return None
    return {
        "status": drift["status"],
        "reference_days": len(drift.get("reference_partitions", [])),
        "features": {
            name: {k: f.get(k) for k in ("metric", "value", "noise", "threshold", "shift", "status")}
            for name, f in drift["features"].items()
        },
    }


def _training_view(metrics: dict[str, Any] | None, telemetry: dict[str, Any] | None) -> dict[str, Any] | None:
    if not metrics:
        return None
    val = metrics.get("validation") or {}
    base = metrics.get("baseline") or val.get("baseline") or {}
    evidence = (telemetry or {}).get("evidence") or {}
    return {
        **_scores_view(val, base),
        "bottleneck": (telemetry or {}).get("classification"),
        # The numbers behind the class ("data wait 3%, all-reduce 0% ... under their thresholds").
        "bottleneck_reason": (telemetry or {}).get("reason"),
        "data_wait_share": ((telemetry or {}).get("shares") or {}).get("data"),
        "samples_per_second": metrics.get("samples_per_second"),
        "precision": metrics.get("precision"),
        "restarts": metrics.get("restarts"),
        "resumed_from": metrics.get("resumed_from"),
        # Per epoch: the train split's mean loss and the validation split's loss (the curve).
        "history": [
            {
                "epoch": h.get("epoch"),
                "train_loss": h.get("train_loss"),
                "validation_loss": (h.get("validation") or {}).get("loss"),
            }
            for h in metrics.get("history") or []
        ],
        "shares": (telemetry or {}).get("shares"),
        "peak_memory_bytes": evidence.get("peak_memory_bytes"),
        "device_memory_bytes": evidence.get("device_memory_bytes"),
        "memory_share": evidence.get("memory_share"),
        "device": metrics.get("device"),
        "world_size": metrics.get("world_size"),
    }


def _scores_view(val: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The validation scores and their baseline: a regression's MAE, RMSE and R² against
    always predicting the train mean (`lakeprep_train.metrics.regression_metrics`), or a
    classifier's accuracy, balanced accuracy and AUC against the majority class."""
    if "rmse" in val:
        return {
            "kind": "regression",
            **{f"validation_{k}": val.get(k) for k in ("mae", "rmse", "r2")},
            **{f"baseline_{k}": base.get(k) for k in ("mae", "rmse", "r2")},
            "baseline_mean": base.get("mean"),
        }
    return {
        "kind": "classification",
        "validation_accuracy": val.get("accuracy"),
        "validation_balanced_accuracy": val.get("balanced_accuracy"),
        "validation_auc": val.get("auc"),
        "baseline_accuracy": base.get("accuracy"),
        "baseline_balanced_accuracy": base.get("balanced_accuracy"),
        "baseline_auc": base.get("auc"),
        "baseline_class": base.get("majority_class"),
        "baseline_source": base.get("source"),
    }


def scores_line(t: dict[str, Any]) -> str:
    """The trainer's validation scores against their baseline, in words (summary.md, report.html)."""
    if t.get("kind") == "regression":
        return (
            f"validation MAE {_fmt(t['validation_mae'])}, RMSE {_fmt(t['validation_rmse'])}, "
            f"R² {_fmt(t['validation_r2'])} vs the train-mean baseline (always "
            f"{_fmt(t['baseline_mean'])}: MAE {_fmt(t['baseline_mae'])}, RMSE {_fmt(t['baseline_rmse'])}, "
            f"R² {_fmt(t['baseline_r2'])})"
        )
    source = "the training majority" if t.get("baseline_source") == "train" else "the split's majority"
    return (
        f"validation accuracy {_fmt(t['validation_accuracy'])}, balanced accuracy "
        f"{_fmt(t.get('validation_balanced_accuracy'))}, AUC {_fmt(t['validation_auc'])} "
        f"vs majority-class baseline {_fmt(t['baseline_accuracy'])} (always class {t['baseline_class']}, "
        f"{source}; balanced accuracy {_fmt(t.get('baseline_balanced_accuracy'))}, "
        f"AUC {_fmt(t.get('baseline_auc'))})"
    )


def strata_words(day: dict[str, Any]) -> str:
    """What the label's counts are counts of: classes, or a continuous label's quantile bins."""
    label = day.get("label") or {}
    if is_continuous(day):
        return f"label bins ({label['bins']} quantiles of {label['column']}: strata, not classes)"
    return "class balance"


def render(day: dict[str, Any]) -> str:
    """The summary as Markdown (also what the demo prints)."""
    lines = [
        f"## lakeprep {day['dataset']} {day['logical_date']}",
        "",
        "| stage | rows in | rows out | removed | added | balances |",
        "|---|---:|---:|---|---|---|",
    ]
    for stage, r in day["stages"].items():
        if r is None:
            lines.append(f"| {stage} | - | - | - | - | - |")
        else:
            # The window stages read the whole trailing window, not just this day.
            name = f"{stage} (window)" if stage in pipeline.WINDOW_STAGES else stage
            lines.append(
                f"| {name} | {r['rows_in']} | {r['rows_out']} | {moves(r['removed'])} | "
                f"{moves(r['added'])} | {balance_cell(r['unaccounted'])} |"
            )
    lines.append("")
    for problem in day["rows_not_balanced"]:
        lines.append(f"DOES NOT BALANCE: {problem}")
    if day["quarantine_reasons"]:
        lines.append(
            "quarantine reasons: " + ", ".join(f"{k}: {v}" for k, v in day["quarantine_reasons"].items())
        )
    if day.get("reference_snapshots"):
        lines.append(
            "reference tables joined: "
            + ", ".join(
                f"{name} {read['snapshot'] or '(no snapshots)'} ({read['uri']})"
                for name, read in day["reference_snapshots"].items()
            )
        )
    for name, cut in day.get("text_truncation", {}).items():
        lines.append(
            f"text {name} cut at {cut['max_tokens']} tokens by its tokenizer: "
            + ", ".join(
                f"{split} {n['rows_truncated']} of {n['rows']} rows ({n['tokens_cut']} tokens cut)"
                for split in layout.SPLITS  # train, validation, test (the report's keys are sorted)
                if (n := cut["splits"].get(split))
            )
        )
    continuous = is_continuous(day)
    if day["class_counts_before_sampling"]:
        lines.append(
            f"{strata_words(day)}: before sampling {day['class_counts_before_sampling']}, "
            f"after {day['class_counts_after_sampling']}"
        )
    b = day.get("class_balance")
    if b:
        if continuous:  # the spec refuses balancing a continuous label's bins: never balanced
            lines.append(
                f"{strata_words(day)} of the window (sampling.json): before sampling "
                f"{b['before_sampling']}; train only: augment {b['augment']} ({b['synthetic']} "
                "synthetic rows); never balanced or weighted"
            )
        else:
            lines.append(
                f"class balance of the window (sampling.json): before sampling {b['before_sampling']}; "
                f"train only: {b['strategy']} (target ratio {b['target_ratio']}), augment {b['augment']} "
                f"({b['synthetic']} synthetic rows), class weights {b['class_weights']}"
            )
        for split, steps in b["splits"].items():
            if split == "train" and continuous:
                lines.append(f"  train: sampled {steps['sample']} -> augmented {steps['augment']}")
            elif split == "train":
                lines.append(
                    f"  train: sampled {steps['sample']} -> balanced {steps['balance']} "
                    f"-> augmented {steps['augment']}"
                )
            else:
                lines.append(f"  {split}: {steps['augment']} (as sampled: never balanced or augmented)")
    d = day["drift"]
    if d:
        lines.append(f"drift against {d['reference_days']} earlier day(s): {d['status']}")
        for name, f in d["features"].items():
            value = "-" if f["value"] is None else f"{f['value']:.4f}"
            noise = "" if f.get("noise") is None else f"noise {f['noise']:.4f}, "
            line = f"  {name}: {f['metric']} {value} ({noise}threshold {f['threshold']:.4g})"
            shift = f.get("shift")
            if shift:
                line += (
                    f", {shift['measure']} shift {shift['value']:+.3f} "
                    f"(noise {shift['noise']:.3f}, threshold {shift['threshold']:.3g})"
                )
            lines.append(f"{line} {f['status']}")
    t = day["transform"]
    if t:
        lines.append(f"transform: {t['uri']} (fitted on {t['fitted_on_rows']} train rows of the window)")
        if t["vocabulary_sizes"]:
            lines.append("  vocabularies: " + ", ".join(f"{k} {v}" for k, v in t["vocabulary_sizes"].items()))
        if t["dropped"]:
            lines.append("  left out: " + "; ".join(f"{x['name']} ({x['reason']})" for x in t["dropped"]))
        if t["constant_numerics"]:
            lines.append(f"  constant on the train split (centred, not scaled): {t['constant_numerics']}")
        if continuous:
            target = day["label"]["target"]
            lines.append(
                f"  label {day['label']['column']}: the trainer regresses (value - {target['mean']:.6g}) / "
                f"{target['std']:.6g}, the train split's mean and standard deviation ({target['rows']} rows)"
            )
    w = day["window"]
    if w:
        lines.append(
            f"window {w['days'][0]}..{w['days'][-1]}: {len(w['complete'])} day(s) read"
            + (f", failed {w['failed']}" if w["failed"] else "")
            + (f", missing {w['missing']}" if w["missing"] else "")
            + (f", {len(w['before_start'])} before the start date" if w["before_start"] else "")
        )
    if day["shards"]:
        parts = [
            f"{s}: {v['shards']} entries, {v['rows']} rows ({v['plan']['rows_per_rank']}/rank x "
            f"{v['plan']['world_size']} rank(s), {v['plan']['steps_per_rank']} steps/rank)"
            for s, v in day["shards"].items()
        ]
        kind = (
            "entries over the sampled days' files"
            if day.get("shard_columns") == "prepared"
            else "encoded shards"
        )
        lines.append(f"{kind}, {day['source_partitions']} day(s): " + "; ".join(parts))
    t = day["training"]
    if t:
        lines.append(f"trainer: {scores_line(t)}")
        if t["bottleneck"]:
            lines.append(
                f"  bottleneck: {t['bottleneck']}: {t['bottleneck_reason']}; "
                f"{t['samples_per_second']:.0f} samples/s, {t['precision']}"
                + (f", {t['restarts']} restart(s)" if t.get("restarts") else "")
                + (
                    f", resumed at epoch {t['resumed_from']['epoch'] + 1} step {t['resumed_from']['step']}"
                    if t.get("resumed_from")
                    else ""
                )
            )
    if day.get("day_shards"):
        lines.append(f"day's shards: {day['day_shards']}")
    lines += [f"manifest: {day['manifest']}", f"model: {day['model']}", f"report: {day['report']}", ""]
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def moves(counts: dict[str, int]) -> str:
    """`undersampled 281, synthetic 0` without the zeros; `-` for none."""
    return ", ".join(f"{name} {n}" for name, n in counts.items() if n) or "-"


def balance_cell(unaccounted: int | None) -> str:
    """The table's check: rows in = rows out + removed - added."""
    if unaccounted is None:
        return "unknown"
    return "yes" if unaccounted == 0 else f"no: {unaccounted:+d} unaccounted"


def write(lake_root: str, day: dict[str, Any], *, webhdfs_conn_id: str = "webhdfs_default") -> str:
    """Write summary.json, summary.md and report.html for the day; returns report.html's URI."""
    from lakeprep_airflow import report  # matplotlib, imported only when a report is written

    uri = lake_uri(lake_root, layout.REPORTS, day["dataset"], day["logical_date"])
    fs, path = lake_fs.resolve(uri, webhdfs_conn_id=webhdfs_conn_id)
    fs.makedirs(path)
    fs.write_bytes(lake_fs.join(path, "summary.json"), json.dumps(day, indent=2, sort_keys=True).encode())
    fs.write_bytes(lake_fs.join(path, "summary.md"), render(day).encode())
    # Served by the Airflow UI while a rerun may rewrite it: readers see a whole page.
    lake_fs.write_atomic(fs, lake_fs.join(path, REPORT_HTML), report.build_html(day).encode())
    return layout.join(uri, REPORT_HTML)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--from", dest="first", type=dt.date.fromisoformat, required=True)
    parser.add_argument("--to", dest="last", type=dt.date.fromisoformat, required=True)
    args = parser.parse_args(argv)
    day = args.first
    while day <= args.last:
        summary = collect(args.lake, args.dataset, day.isoformat())
        write(args.lake, summary)
        print(render(summary))
        day += dt.timedelta(days=1)


if __name__ == "__main__":
    main()
