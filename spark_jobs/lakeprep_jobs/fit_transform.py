"""Fit the run's one transform by merging the window's per-day statistics.

    spark-submit --py-files lakeprep_jobs.zip lakeprep_jobs/fit_transform.py \
        --input <lake>/sample/flights/dt=2013-01-01 ... --input <lake>/sample/flights/dt=2013-01-03 \
        --output <lake>/fit_transform/flights/dt=2013-01-03 --params '{...}'

Everything learned from data is learned here, once per run, from the **train** split of
the window's sampled days, and written as `transform.json` (docs/TRANSFORM.md).
`export_shards` then applies it unchanged to every split (`lakeprep_contracts.encode`).

No row is read and no Spark job runs, so the stage runs in the Airflow worker
(`lakeprep_airflow.operators.window_stage`, `run_on` a `lakeprep_jobs.lake.Lake`) as well
as in a submission. Each sampled day recorded its mergeable statistics once, when it was
sampled (`_fit_statistics.json`, `lakeprep_jobs.fit_statistics`), and the fit is their
merge (`lakeprep_contracts.day_statistics`) followed by plain Python
(`lakeprep_contracts.window_fit`, `lakeprep_contracts.selection`): its cost grows with
the window's days, not their rows, and no Spark job runs. `fit` does the same over a
DataFrame (the statistics of its rows, then the same merge): a fit of one frame and a
fit of its days merged are the same fit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakeprep_contracts import day_statistics, layout, window_fit
from lakeprep_contracts.text import SUBWORD
from lakeprep_contracts.window_fit import (  # noqa: F401 - the stage's params and errors, re-exported
    PCA_MAX_COLUMNS,
    FitError,
    FitParams,
    check_pca_size,
    check_selector_threshold,
)
from lakeprep_jobs import session, stage_entry
from lakeprep_jobs.fit_statistics import split_statistics
from lakeprep_jobs.lake import (
    Lake,
    PartitionCommit,
    SparkLake,
    read_json,
    write_report,
    write_success,
    write_text,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakeprep_contracts.day_statistics import SplitStatistics


def fit(
    train: DataFrame, p: FitParams, *, rows: int, partitions: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the transform document, notes for the report) fitted on the rows of `train`.

    The statistics of the frame as one day's, then the window's merge over that one
    day: the rows count as train whatever their `split` column says (or lacks).
    `rows` is checked against what the statistics count.
    """
    from pyspark.sql import functions as F

    frame = train.withColumn(layout.SPLIT, F.lit("train"))
    doc = split_statistics(frame, window_fit.profile(p), p.label_classes)
    stats = day_statistics.merge([("the frame", doc)], "train", window_fit.profile(p))
    stats.partitions = list(partitions)
    if stats.rows != rows:
        raise ValueError(f"fit: {rows} train rows given, the statistics count {stats.rows}")
    return window_fit.fit(stats, p)


def read_statistics(lake: Lake, inputs: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(partition, its `_fit_statistics.json`) of each committed input, oldest first."""
    out, absent = [], []
    for uri in inputs:
        if not lake.exists(layout.join(uri, layout.SUCCESS)):
            raise FileNotFoundError(
                f"input partition {uri} is not complete (no {layout.SUCCESS}): the stage that writes it "
                "failed or has not finished"
            )
        where = layout.join(uri, layout.FIT_STATISTICS)
        if not lake.exists(where):
            absent.append(uri)
            continue
        out.append((uri, read_json(lake, where)))
    if absent:
        raise day_statistics.StatisticsError(
            f"sampled days without {layout.FIT_STATISTICS} (sampled before lakeprep recorded per-day "
            f"statistics): {absent}. Rerun `sample` for those days (clear and rerun their tasks, or a "
            "backfill with --reprocess-behavior completed)"
        )
    return out


def read_tokenizers(
    lake: Lake, p: FitParams, stats: SplitStatistics | None = None
) -> dict[str, tuple[dict[str, Any], bytes]]:
    """Per ``encoding: tokenizer`` text feature: (its file's facts, its bytes), read from the
    URI the spec gives (``columns[].transform.tokenizer``), or trained on the window's train
    split from the days' merged word counts in ``stats`` (``transform.tokenizer_model``;
    the facts then hold ``trained``: what it learned from).

    :raises TransformError: (a refusal) no file at the URI, a file that is not a tokenizer,
        or one that pads with an id other than 0.
    :raises ValueError: (a refusal) no train word to learn a tokenizer from.
    """
    from lakeprep_contracts import encode, subword_training

    out = {}
    for col in p.text:
        if col["encoding"] != SUBWORD:
            continue
        if subword_training.trains_tokenizer(col):
            if stats is None or col["name"] not in stats.text:
                raise FitError(f"text {col['name']!r}: tokenizer_model needs the days' word counts")
            data, trained = subword_training.train_from_counts(
                stats.text[col["name"]],
                col["tokenizer_model"],
                int(col["vocab_size"]),
                min_frequency=int(col["min_frequency"]),
            )
            facts = encode.tokenizer_facts(data, f"text {col['name']!r}: the tokenizer trained on the window")
            out[col["name"]] = ({**facts, "trained": trained}, data)
            continue
        uri = col.get("tokenizer")
        if not uri:
            raise ValueError(
                f"text {col['name']!r}: encoding tokenizer needs transform.tokenizer, the URI of a "
                "Hugging Face tokenizer.json"
            )
        if not lake.exists(uri):
            raise encode.TransformError(
                f"text {col['name']!r}: no tokenizer file at {uri} (columns[].transform.tokenizer): "
                "put the model's tokenizer.json there or fix the URI"
            )
        data = lake.read_bytes(uri)
        out[col["name"]] = (encode.tokenizer_facts(data, f"text {col['name']!r}: {uri}"), data)
    return out


def check_document(doc: dict[str, Any], where: str) -> None:
    """The writer checks what every reader will check (the JSON Schema)."""
    from lakeprep_contracts import documents

    documents.require("transform", doc, where)


def run(spark: SparkSession, inputs: list[str], output: str, p: FitParams) -> dict[str, Any]:
    return run_on(SparkLake(spark), inputs, output, p)


def run_on(lake: Lake, inputs: list[str], output: str, p: FitParams) -> dict[str, Any]:
    """The stage over any `Lake`: in a Spark driver (`run`) or an Airflow worker."""
    docs = read_statistics(lake, inputs)
    stats = day_statistics.merge(docs, "train", window_fit.profile(p))
    counts = {
        split: sum(int(n) for _, doc in docs for n in doc["splits"][split]["rows"].values())
        for split in layout.SPLITS
    }
    if stats.rows == 0:
        raise FitError(
            f"window {inputs[0]} .. {inputs[-1]}: no train rows to fit the transform on "
            f"(rows per split {counts}); widen window.days or the sample fractions"
        )
    tokenizers = read_tokenizers(lake, p, stats)
    doc, notes = window_fit.fit(stats, p, {name: facts for name, (facts, _) in tokenizers.items()})
    for message in notes["warnings"]:
        session.log.warning("fit_transform: %s", message)
    check_document(doc, f"{output}/{layout.TRANSFORM}")
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
    report = {
        "stage": "fit_transform",
        "inputs": inputs,
        "rows_in": sum(counts.values()),
        "rows_out": sum(counts.values()),
        "rows_quarantined": 0,
        "fitted_on_rows": stats.rows,
        "rows_per_split": {s: n for s, n in counts.items() if n},
        "dropped": doc["dropped"],
        "vocabulary_sizes": {
            e["name"]: len(e["vocabulary"]) for e in doc["categorical"] + doc["text"] if "vocabulary" in e
        },
        # Centred with scale 1; the variance threshold (min_variance) drops them.
        "constant_numerics": notes["constant_numerics"],
        "selected": {
            "numeric": [e["output"] for e in doc["numeric"]],
            "categorical": [e["output"] for e in doc["categorical"]],
        },
        "pca": None
        if doc["pca"] is None
        else {"k": doc["pca"]["k"], "explained_variance": sum(doc["pca"]["explained_variance"])},
        "warnings": notes["warnings"],
    }
    trained = {name: facts["trained"] for name, (facts, _) in tokenizers.items() if "trained" in facts}
    if trained:  # only where a text trains one: other specs' reports unchanged
        report["tokenizers_trained"] = trained
    with PartitionCommit(lake, output) as staging:
        write_text(lake, layout.join(staging, layout.TRANSFORM), text)
        # Each tokenizer file beside transform.json, under the name the document gives it.
        for name, (_, data) in tokenizers.items():
            lake.write_bytes(layout.join(staging, window_fit.tokenizer_file_name(name)), data)
        write_report(lake, staging, report)
        write_success(lake, staging)
    return report


STAGE = stage_entry.Stage("fit_transform", __doc__.splitlines()[0], FitParams, run)


def main(argv: Sequence[str] | None = None) -> None:
    stage_entry.stage_main(argv, STAGE)


if __name__ == "__main__":
    main()
