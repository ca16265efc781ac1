"""The run report (`lakeprep_airflow.report`) and the pure parts of its route (`report_app`).

The lake is hand-written: each stage's `_lakeprep_report.json`, and `transform.json`,
`drift.json` and `sampling.json` checked against their schemas in lakeprep_contracts, so
the report is built from documents the stages could have written.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import subprocess
import sys
from html.parser import HTMLParser
from io import BytesIO
from pathlib import Path

import pytest

from lakeprep_airflow import report, report_app, summary
from lakeprep_contracts import documents
from tests.training.transform_doc import make_doc, numeric

REPO = Path(__file__).resolve().parents[2]
DS = "2013-01-03"
RUN_ID = "manual__2013-01-03T00:00:00+00:00"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
HISTORY = [(1, 0.69, 0.70), (2, 0.61, 0.66), (3, 0.55, 0.64)]


def _write(lake: Path, stage: str, name: str, doc: dict, ds: str = DS) -> None:
    path = lake / stage / "flights" / f"dt={ds}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def _transform(pca: bool) -> dict:
    doc = make_doc(numerics=[numeric("distance"), numeric("temp")], categoricals=[], texts=[])
    score = {"test": "variance", "p_value": None, "degrees_of_freedom": None}
    doc["selection"] = {
        "variance_threshold": {
            "method": "VarianceThresholdSelector",
            "threshold": 1e-6,
            "scores": [
                {
                    **score,
                    "name": "distance",
                    "output": "num__distance",
                    "statistic": 1.0,
                    "kept": True,
                    "reason": None,
                },
                {
                    **score,
                    "name": "temp",
                    "output": "num__temp",
                    "statistic": 0.8,
                    "kept": True,
                    "reason": None,
                },
                {
                    **score,
                    "name": "precip",
                    "output": "num__precip",
                    "statistic": 0.0,
                    "kept": False,
                    "reason": "variance 0 <= min_variance 1e-06",
                },
            ],
        },
        "univariate": None,
    }
    if pca:
        doc["numeric"] = [
            {"name": "pc1", "output": "num__pc1", "pca_component": 1},
            {"name": "pc2", "output": "num__pc2", "pca_component": 2},
        ]
        doc["pca"] = {
            "method": "PCA",
            "k": 2,
            "variance_target": 0.9,
            "inputs": [numeric("distance"), numeric("temp")],
            "mean": [0.0, 0.0],
            "components": [[0.6, 0.8], [-0.8, 0.6]],
            "explained_variance": [0.72, 0.21],
            "outputs": ["num__pc1", "num__pc2"],
        }
    assert documents.problems("transform", doc) == []
    return doc


def _drift() -> dict:
    feature = {"reference_days": 2}
    doc = {
        "dataset": "flights",
        "logical_date": DS,
        "run_id": RUN_ID,
        "format_version": 1,
        "partition": f"file:///lake/validate/flights/dt={DS}",
        "reference_partitions": [f"file:///lake/validate/flights/dt=2013-01-0{d}" for d in (1, 2)],
        "params": {
            "psi_threshold": 0.25,
            "jsd_threshold": 0.1,
            "action": "warn",
            "min_reference_days": 1,
            "bins": 10,
            "alpha": 0.01,
            "min_effect": 0.2,
            "min_rows": 100,
        },
        "features": {
            "carrier": {
                **feature,
                "kind": "categorical",
                "metric": "jsd",
                "value": 0.05,
                "threshold": 0.1,
                "status": "ok",
            },
            "temp": {
                **feature,
                "kind": "numeric",
                "metric": "psi",
                "value": 3.92,
                "noise": 0.0412,
                "threshold": 0.25,
                "status": "drift",
            },
            "distance": {
                **feature,
                "kind": "numeric",
                "metric": "psi",
                "value": 0.03,
                "threshold": 0.25,
                "status": "ok",
            },
        },
        "status": "drift",
        "drifting": ["temp"],
    }
    problems = documents.problems("drift", doc)
    assert problems == [], problems
    return doc


def _sampling() -> dict:
    splits = {"train": {"0": 150, "1": 60}, "validation": {"0": 20, "1": 10}, "test": {"0": 20, "1": 10}}
    balanced = {**splits, "train": {"0": 60, "1": 60}}
    doc = {
        "balance": {
            "augment": "none",
            "jitter_sigma": 0.1,
            "seed": 7,
            "smote_candidates": 16,
            "strategy": "undersample",
            "synthetic_per_row": 1,
            "target_ratio": 1.0,
            "token_dropout": 0.1,
        },
        "class_weights": {"0": 1.0, "1": 1.0},
        "dataset": "flights",
        "days": 3,
        "format_version": 1,
        "label": {"classes": [0, 1], "name": "label"},
        "logical_date": DS,
        "rows_without_neighbour": 0,
        "run_id": RUN_ID,
        "steps": [
            {
                "class_counts": {"0": 190, "1": 80},
                "days_reported": 3,
                "splits": None,
                "step": "before_sampling",
            },
            {"class_counts": {"0": 190, "1": 80}, "splits": splits, "step": "sample"},
            {
                "class_counts": {"0": 100, "1": 80},
                "splits": balanced,
                "step": "balance",
                "strategy": "undersample",
            },
            {"class_counts": {"0": 100, "1": 80}, "method": "none", "splits": balanced, "step": "augment"},
        ],
        "synthetic": {s: {"0": 0, "1": 0} for s in splits},
    }
    problems = documents.problems("sampling", doc)
    assert problems == [], problems
    return doc


def export_report(**moves: int) -> dict:
    """export_shards' report as it writes it: train undersampled 210 -> 120 (sampling.json)."""
    report = {"rows_in": 270, "rows_out": 180, "rows_quarantined": 0, "rows_undersampled": 90}
    report.update(rows_oversampled=0, rows_synthetic=0, rows_dropped_for_balance=0, rows_padded_for_balance=0)
    return {**report, **moves}


def write_day(lake: Path, *, pca: bool = True, model: bool = True, history=HISTORY) -> None:
    """One day of flights as every stage (and the trainer) would leave it."""
    _write(
        lake,
        "validate",
        "_lakeprep_report.json",
        {
            "rows_in": 120,
            "rows_out": 110,
            "rows_quarantined": 10,
            "quarantine_reasons": {"null label (delayed)": 7, "distance: not a double": 3},
        },
    )
    _write(
        lake,
        "preprocess",
        "_lakeprep_report.json",
        {
            "rows_in": 110,
            "rows_out": 108,
            "rows_quarantined": 2,
            "quarantine_reasons": {"duplicate id": 2},
        },
    )
    _write(
        lake,
        "sample",
        "_lakeprep_report.json",
        {
            "rows_in": 108,
            "rows_out": 100,
            "rows_quarantined": 0,
            "rows_sampled_out": 8,
            "class_counts_before": {"0": 80, "1": 28},
            "class_counts_after": {"0": 74, "1": 26},
        },
    )
    _write(
        lake,
        "fit_transform",
        "_lakeprep_report.json",
        {
            "rows_in": 270,
            "rows_out": 270,
            "rows_quarantined": 0,
            "fitted_on_rows": 210,
            "vocabulary_sizes": {"carrier": 12},
            "dropped": [],
            "constant_numerics": [],
        },
    )
    _write(lake, "fit_transform", "transform.json", _transform(pca))
    _write(
        lake,
        "export_shards",
        "_lakeprep_report.json",
        export_report(),
    )
    _write(lake, "export_shards", "sampling.json", _sampling())
    _write(lake, "check_drift", "drift.json", _drift())
    plan = {"rows_per_rank": 120, "world_size": 1, "steps_per_rank": 1}
    _write(
        lake,
        "export_shards",
        "manifest.json",
        {
            "run_id": RUN_ID,
            "window": {
                "days": ["2013-01-01", DS],
                "complete": ["2013-01-01", "2013-01-02", DS],
                "failed": [],
                "missing": [],
                "before_start": [],
            },
            "splits": {
                s: {"shards": [{}], "rows": 60, "plan": plan} for s in ("train", "validation", "test")
            },
            "source_partitions": ["a", "b", "c"],
        },
    )
    if not model:
        return
    baseline = {
        "majority_class": 0,
        "source": "train",
        "accuracy": 0.68,
        "balanced_accuracy": 0.5,
        "auc": 0.5,
    }
    _write(
        lake,
        "models",
        "metrics.json",
        {
            "validation": {
                "loss": 0.64,
                "accuracy": 0.61,
                "balanced_accuracy": 0.6,
                "auc": 0.66,
                "baseline": baseline,
            },
            "baseline": baseline,
            "history": [
                {"epoch": e, "train_loss": t, "rows": 120, "validation": {"loss": v}} for e, t, v in history
            ],
            "samples_per_second": 600.0,
            "precision": "fp32",
            "restarts": 0,
            "resumed_from": None,
            "device": "cpu",
            "world_size": 1,
        },
    )
    _write(
        lake,
        "models",
        "telemetry.json",
        {
            "classification": "compute-bound",
            "reason": "data wait 5%, all-reduce 0% of step time and peak memory 3%, all under thresholds",
            "shares": {"data": 0.05, "compute": 0.95, "comm": 0.0},
            "evidence": {
                "peak_memory_bytes": 800 * 2**20,
                "device_memory_bytes": 24 * 2**30,
                "memory_share": 0.033,
            },
        },
    )


class _Sections(HTMLParser):
    """Each <section id=...>: its text and its <img> sources."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict] = {}
        self._current: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self._current:  # cells and paragraphs read as separate words
            self.sections[self._current]["text"] += " "
        if tag == "section":
            self._current = attrs["id"]
            self.sections[self._current] = {"text": "", "imgs": []}
        elif tag == "img" and self._current:
            self.sections[self._current]["imgs"].append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "section":
            self._current = None

    def handle_data(self, data):
        if self._current:
            self.sections[self._current]["text"] += data


def sections_of(page: str) -> dict[str, dict]:
    parser = _Sections()
    parser.feed(page)
    return parser.sections


def png_of(src: str):
    from PIL import Image

    prefix = "data:image/png;base64,"
    assert src.startswith(prefix), src[:40]
    data = base64.b64decode(src[len(prefix) :], validate=True)
    assert data.startswith(PNG_SIGNATURE)
    image = Image.open(BytesIO(data))
    image.verify()
    return data, image.size


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


def test_the_report_has_every_section_with_embedded_png_plots(lake):
    write_day(lake)
    page = report.build_html(summary.collect(f"file://{lake}", "flights", DS))

    sections = sections_of(page)
    assert list(sections) == list(report.SECTIONS)
    plots = {key: len(s["imgs"]) for key, s in sections.items()}
    assert plots == {
        "rows": 1,
        "quarantine": 1,
        "class-balance": 1,
        "drift": 1,
        "transform": 2,
        "training": 2,
    }
    for s in sections.values():
        for src in s["imgs"]:
            _, (width, height) = png_of(src)
            assert width > 100 and height > 100
    text = {key: " ".join(s["text"].split()) for key, s in sections.items()}
    assert "validate 120 110 quarantined 10 - yes" in text["rows"]
    assert "export_shards (window) 270 180 undersampled 90 - yes" in text["rows"]
    assert "null label (delayed) 7" in text["quarantine"] and "duplicate id 2" in text["quarantine"]
    assert "train balanced {'0': 60, '1': 60}" in text["class-balance"]
    assert "the day before sampling {'0': 80, '1': 28}" in text["class-balance"]
    assert "temp psi 3.9200 0.0412 0.25 - drift" in text["drift"] and "drift" in text["drift"].split(":")[1]
    assert "PCA: 2 component(s), 93.0% of the variance" in text["transform"]
    assert "precip variance 0 - no variance 0 <= min_variance 1e-06" in text["transform"]
    assert (
        "Bottleneck: compute-bound" in text["training"]
        and "peak memory 800 MiB of 24.0 GiB" in text["training"]
    )
    assert RUN_ID in page


def test_the_loss_curve_is_drawn_from_the_trainers_history(lake, tmp_path):
    write_day(lake)
    day = summary.collect(f"file://{lake}", "flights", DS)
    assert day["training"]["history"] == [
        {"epoch": e, "train_loss": t, "validation_loss": v} for e, t, v in HISTORY
    ]
    other = tmp_path / "other"
    write_day(other, history=[(1, 0.69, 0.70), (2, 0.68, 0.71), (3, 0.40, 0.90)])
    loss_plot = [
        sections_of(report.build_html(summary.collect(f"file://{x}", "flights", DS)))["training"]["imgs"][0]
        for x in (lake, other)
    ]
    assert png_of(loss_plot[0])[0] != png_of(loss_plot[1])[0]
    # The same data draws the same bytes (no timestamps in the PNG).
    assert report.build_html(day) == report.build_html(copy.deepcopy(day))


def test_a_day_without_pca_or_model_says_so(lake):
    write_day(lake, pca=False, model=False)
    sections = sections_of(report.build_html(summary.collect(f"file://{lake}", "flights", DS)))
    assert "No PCA configured" in sections["transform"]["text"]
    assert len(sections["transform"]["imgs"]) == 1  # the feature scores are still there
    assert "No model yet" in sections["training"]["text"] and sections["training"]["imgs"] == []
    assert len(sections["drift"]["imgs"]) == 1


def test_a_day_nothing_has_run_for_yet_is_a_page_of_notes(lake):
    lake.mkdir()
    sections = sections_of(report.build_html(summary.collect(f"file://{lake}", "flights", DS)))
    assert list(sections) == list(report.SECTIONS)
    assert all(s["imgs"] == [] for s in sections.values())
    assert "has not run" in sections["drift"]["text"] and "No model yet" in sections["training"]["text"]


def test_every_stage_row_names_what_it_removed_or_added_and_balances(lake):
    write_day(lake)
    day = summary.collect(f"file://{lake}", "flights", DS)

    assert day["stages"]["export_shards"] == {
        "rows_in": 270,
        "rows_out": 180,
        "removed": {"quarantined": 0, "undersampled": 90, "rank remainder dropped": 0},
        "added": {"oversampled": 0, "synthetic": 0, "rank remainder padded": 0},
        "unaccounted": 0,
    }
    assert day["stages"]["sample"]["removed"] == {"quarantined": 0, "sampled out": 8}
    assert day["rows_not_balanced"] == []
    text = summary.render(day)
    assert "| stage | rows in | rows out | removed | added | balances |" in text
    assert "| validate | 120 | 110 | quarantined 10 | - | yes |" in text
    assert "| sample | 108 | 100 | sampled out 8 | - | yes |" in text
    assert "| fit_transform (window) | 270 | 270 | - | - | yes |" in text
    assert "| export_shards (window) | 270 | 180 | undersampled 90 | - | yes |" in text
    assert "DOES NOT BALANCE" not in text
    summary.write(f"file://{lake}", day)
    written = json.loads((lake / "reports" / "flights" / f"dt={DS}" / "summary.json").read_text())
    assert written["stages"]["export_shards"]["removed"]["undersampled"] == 90
    assert written["rows_not_balanced"] == []


def test_rows_added_by_balancing_count_against_rows_removed(lake):
    write_day(lake)
    # Train oversampled 210 -> 300, 20 synthetic rows, 5 dropped for equal ranks: 270 -> 375.
    sampling = _sampling()
    steps = {s["step"]: s for s in sampling["steps"]}
    steps["balance"]["splits"] = {**steps["balance"]["splits"], "train": {"0": 150, "1": 150}}
    steps["augment"]["splits"] = {**steps["augment"]["splits"], "train": {"0": 150, "1": 170}}
    _write(lake, "export_shards", "sampling.json", sampling)
    moves = {"rows_undersampled": 0, "rows_oversampled": 90, "rows_synthetic": 20}
    moves.update(rows_dropped_for_balance=5, rows_out=375)
    _write(lake, "export_shards", "_lakeprep_report.json", export_report(**moves))

    day = summary.collect(f"file://{lake}", "flights", DS)

    assert day["rows_not_balanced"] == []
    row = "| export_shards (window) | 270 | 375 | rank remainder dropped 5 | oversampled 90, synthetic 20 |"
    assert row + " yes |" in summary.render(day)


def test_text_a_tokenizer_cuts_is_shown_per_split_in_split_order(lake):
    write_day(lake)
    cut = {"train": {"rows": 70, "rows_truncated": 9, "tokens_cut": 310}}
    cut |= {"validation": {"rows": 20, "rows_truncated": 0, "tokens_cut": 0}}
    cut |= {"test": {"rows": 10, "rows_truncated": 1, "tokens_cut": 4}}
    report = {"rows_in": 108, "rows_out": 100, "rows_sampled_out": 8}
    report["text_truncation"] = {"plane_model": {"max_tokens": 8, "tokenizer": "t.json", "splits": cut}}
    _write(lake, "sample", "_lakeprep_report.json", json.loads(json.dumps(report, sort_keys=True)))

    text = summary.render(summary.collect(f"file://{lake}", "flights", DS))

    assert (
        "text plane_model cut at 8 tokens by its tokenizer: train 9 of 70 rows (310 tokens cut), "
        "validation 0 of 20 rows (0 tokens cut), test 1 of 10 rows (4 tokens cut)"
    ) in text


def test_a_stage_that_does_not_balance_is_named_with_its_numbers(lake):
    write_day(lake)
    # The export's report without its undersampling: 90 of the window's rows go nowhere.
    _write(
        lake,
        "export_shards",
        "_lakeprep_report.json",
        {"rows_in": 270, "rows_out": 180, "rows_quarantined": 0},
    )

    day = summary.collect(f"file://{lake}", "flights", DS)

    assert day["stages"]["export_shards"]["unaccounted"] == 90
    assert day["rows_not_balanced"] == [
        "export_shards: rows in 270 != rows out 180 + removed 0 - added 0: 90 row(s) unaccounted "
        "for in its _lakeprep_report.json",
        "export_shards: rows_undersampled 0 in its _lakeprep_report.json, 90 from the class counts "
        "of sampling.json",
    ]
    text = summary.render(day)
    assert "| export_shards (window) | 270 | 180 | - | - | no: +90 unaccounted |" in text
    assert "DOES NOT BALANCE: export_shards: rows in 270 != rows out 180" in text
    rows = " ".join(sections_of(report.build_html(day))["rows"]["text"].split())
    assert "no: +90 unaccounted" in rows and "Does not balance: export_shards: rows in 270" in rows

    # Balanced on its own, but the moves disagree with the class counts through balancing.
    _write(
        lake,
        "export_shards",
        "_lakeprep_report.json",
        export_report(rows_undersampled=80, rows_dropped_for_balance=10),
    )
    day = summary.collect(f"file://{lake}", "flights", DS)
    assert day["stages"]["export_shards"]["unaccounted"] == 0
    assert day["rows_not_balanced"] == [
        "export_shards: rows_undersampled 80 in its _lakeprep_report.json, 90 from the class counts "
        "of sampling.json"
    ]


def test_write_puts_report_html_beside_summary_md(lake):
    write_day(lake)
    day = summary.collect(f"file://{lake}", "flights", DS)
    uri = summary.write(f"file://{lake}", day)
    folder = lake / "reports" / "flights" / f"dt={DS}"
    assert uri == f"file://{folder}/report.html" == day["report_html"]
    assert (folder / "summary.md").read_text() == summary.render(day)
    assert (folder / "report.html").read_text() == report.build_html(day)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_the_write_report_task_writes_the_runs_report(lake):
    from lakeprep_airflow.operators.report import RunReportOperator

    write_day(lake)
    op = RunReportOperator(
        task_id="write_report", spec_path=str(REPO / "pipelines" / "flights.yaml"), lake_root=f"file://{lake}"
    )
    context = {"ds": DS, "logical_date": dt.datetime(2013, 1, 3, tzinfo=dt.UTC), "run_id": RUN_ID}
    op.render_template_fields(context)
    assert op.run_ds == DS
    result = op.execute(context)
    page = (lake / "reports" / "flights" / f"dt={DS}" / "report.html").read_text()
    assert result == {"report_uri": f"file://{lake}/reports/flights/dt={DS}/report.html"}
    assert len(sections_of(page)["training"]["imgs"]) == 2


# ------------------------------------------------------------------ the route's inputs


def test_a_run_maps_to_its_partition_in_the_lake():
    uri = report_app.report_uri("file:///lake/", "lakeprep_flights", "2013-01-03")
    assert uri == "file:///lake/reports/flights/dt=2013-01-03/report.html"
    # The logical date, else run_after, as its UTC day (RUN_DS_TEMPLATE's `| ds`).
    late = dt.datetime(2013, 1, 3, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert report_app.run_ds(late, None) == "2013-01-04"
    assert report_app.run_ds(None, dt.datetime(2013, 1, 5, 1, tzinfo=dt.UTC)) == "2013-01-05"
    assert report_app.check_run_id("manual__2013-01-03T00:00:00+00:00")


@pytest.mark.parametrize(
    ("dag_id", "ds", "status"),
    [
        ("example_dag", DS, 404),  # not a lakeprep DAG
        ("lakeprep_../etc", DS, 404),
        ("lakeprep_Flights", DS, 404),
        ("lakeprep_flights", "../../etc", 400),
        ("lakeprep_flights", "2013-02-30", 400),
        ("lakeprep_flights", "2013-1-3", 400),
    ],
)
def test_paths_outside_the_layout_are_refused(dag_id, ds, status):
    with pytest.raises(report_app.ReportError) as err:
        report_app.report_uri("file:///lake", dag_id, ds)
    assert err.value.status == status


@pytest.mark.parametrize("run_id", ["..", "a/../b", "x/y", "a\\b", "bad\nid", "", "r" * 251])
def test_run_ids_with_path_steps_are_refused(run_id):
    with pytest.raises(report_app.ReportError, match="not a valid Airflow run id"):
        report_app.check_run_id(run_id)


def test_an_unset_lake_root_is_a_clear_error():
    with pytest.raises(ValueError, match="lakeprep_lake_root"):
        report_app.report_uri("", "lakeprep_flights", DS)


def test_plugin_and_dag_imports_stay_light():
    """Task processes load every plugin file; the DAG processor imports dag_factory."""
    code = (
        "import sys, lakeprep_airflow_plugin, lakeprep_airflow.dag_factory;"
        "heavy = ('matplotlib', 'airflow.api_fastapi.core_api.security');"
        "print(sorted(m for m in heavy if m in sys.modules));"
        "print(lakeprep_airflow_plugin.LakeprepPlugin.external_views)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, views = out.splitlines()[-2:]
    assert loaded == "[]"
    assert "'href': 'lakeprep-report/{DAG_ID}/{RUN_ID}/'" in views and "'destination': 'dag_run'" in views


def test_rows_superseded_by_a_later_day_count_as_removed(lake):
    write_day(lake)
    # 12 rows of the window repeat an id a later day holds: read once, the sample step's
    # class counts (sampling.json) are the window without them.
    _write(lake, "export_shards", "_lakeprep_report.json", export_report(rows_in=282, rows_superseded=12))

    day = summary.collect(f"file://{lake}", "flights", DS)

    assert day["rows_not_balanced"] == []
    row = "| export_shards (window) | 282 | 180 | superseded by a later day 12, undersampled 90 | - |"
    assert row + " yes |" in summary.render(day)


def test_the_reference_snapshots_each_day_joined_are_in_the_summary(lake):
    write_day(lake)
    snapshots = {
        "weather": {"uri": "file:///lake/reference/weather/dt=2013-01-01", "snapshot": "2013-01-01"},
        "planes": {"uri": "file:///lake/reference/planes", "snapshot": None},
    }
    preprocess = {"rows_in": 110, "rows_out": 110, "rows_quarantined": 0, "reference_snapshots": snapshots}
    _write(lake, "preprocess", "_lakeprep_report.json", preprocess)

    day = summary.collect(f"file://{lake}", "flights", DS)

    assert day["reference_snapshots"] == snapshots
    assert (
        "reference tables joined: weather 2013-01-01 (file:///lake/reference/weather/dt=2013-01-01), "
        "planes (no snapshots) (file:///lake/reference/planes)"
    ) in summary.render(day)


def write_regression_day(lake: Path) -> None:
    """write_day with a continuous label: its transform's label.target, the export's bins
    (never balanced), the trainer's MAE/RMSE/R² against the train mean."""
    write_day(lake)
    doc = _transform(pca=False)
    doc["label"] = {
        "column": "progression",
        "output": "label",
        "classes": [0, 1, 2, 3],
        "type": "continuous",
        "target": {"column": "target", "rows": 210, "mean": 151.25, "std": 77.5},
    }
    assert documents.problems("transform", doc) == []
    _write(lake, "fit_transform", "transform.json", doc)
    sampling = _sampling()
    splits = {s: {"0": n, "1": n, "2": n, "3": n} for s, n in (("train", 50), ("validation", 8), ("test", 7))}
    sampling["label"]["classes"] = [0, 1, 2, 3]
    sampling["balance"]["strategy"] = "none"
    sampling["class_weights"] = dict.fromkeys(splits["train"], 1.0)
    sampling["synthetic"] = {s: dict.fromkeys(splits["train"], 0) for s in splits}
    before = {"0": 66, "1": 66, "2": 66, "3": 66}
    sampling["steps"] = [
        {"step": "before_sampling", "class_counts": before, "splits": None, "days_reported": 3},
        {"step": "sample", "class_counts": dict.fromkeys(before, 65), "splits": splits},
        {"step": "balance", "class_counts": dict.fromkeys(before, 65), "splits": splits, "strategy": "none"},
        {"step": "augment", "class_counts": dict.fromkeys(before, 65), "splits": splits, "method": "none"},
    ]
    assert documents.problems("sampling", sampling) == []
    _write(lake, "export_shards", "sampling.json", sampling)
    baseline = {"predict": "train mean", "mean": 151.25, "mae": 64.0, "rmse": 77.0, "r2": -0.01}
    scores = {"loss": 0.55, "mae": 45.5, "rmse": 56.25, "r2": 0.47, "rows": 32, "baseline": baseline}
    metrics = json.loads((lake / "models" / "flights" / f"dt={DS}" / "metrics.json").read_text())
    metrics.update(validation=scores, test=scores, baseline={"split": "validation", **baseline})
    _write(lake, "models", "metrics.json", metrics)


def test_a_regression_day_shows_its_bins_as_strata_and_its_errors_against_the_train_mean(lake):
    write_regression_day(lake)
    day = summary.collect(f"file://{lake}", "flights", DS)
    assert day["label"] == {
        "column": "progression",
        "type": "continuous",
        "bins": 4,
        "target": {"rows": 210, "mean": 151.25, "std": 77.5},
    }
    t = day["training"]
    assert (t["kind"], t["validation_mae"], t["validation_r2"], t["baseline_mean"]) == (
        "regression",
        45.5,
        0.47,
        151.25,
    )
    assert "validation_accuracy" not in t
    text = summary.render(day)
    assert (
        "trainer: validation MAE 45.500, RMSE 56.250, R² 0.470 vs the train-mean baseline "
        "(always 151.250: MAE 64.000, RMSE 77.000, R² -0.010)"
    ) in text
    assert "accuracy" not in text and "majority" not in text and "class weights" not in text
    bins = "label bins (4 quantiles of progression: strata, not classes)"
    assert f"{bins}: before sampling {{'0': 80, '1': 28}}" in text
    assert f"{bins} of the window (sampling.json): before sampling {{'0': 66" in text
    assert "  train: sampled {'0': 50, '1': 50, '2': 50, '3': 50} -> augmented {'0': 50" in text
    assert "label progression: the trainer regresses (value - 151.25) / 77.5" in text
    sections = {k: " ".join(s["text"].split()) for k, s in sections_of(report.build_html(day)).items()}
    assert "Validation MAE 45.500, RMSE 56.250, R² 0.470 vs the train-mean baseline" in sections["training"]
    assert "accuracy" not in sections["training"]
    balance = sections["class-balance"]
    assert "label bin counts" in balance and "balanced" not in balance.replace("never balanced", "")


def test_a_classification_day_keeps_its_classes_and_majority_baseline(lake):
    write_day(lake)
    day = summary.collect(f"file://{lake}", "flights", DS)
    assert day["label"] == {"column": "delayed", "type": "classes", "classes": [0, 1]}
    assert day["training"]["kind"] == "classification"
    text = summary.render(day)
    assert "class balance: before sampling {'0': 80, '1': 28}" in text
    assert "trainer: validation accuracy 0.610, balanced accuracy 0.600, AUC 0.660 vs majority-class" in text
