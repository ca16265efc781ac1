"""Subword tokens through a real Airflow run: standard-library docstrings by module family.

One `airflow dags test lakeprep_docstrings` of a day (tests/data/docstrings.py: the text
column encoded by a WordPiece tokenizer.json trained on the corpus, a day with a text far
longer than `text_max_tokens`), then the loader over the export and `predict` from a copy
of the model folder alone, on texts with words the tokenizer never saw. The day's
truncation is counted by the sample stage and shown in the run summary. The encoder
itself: tests/contracts/test_subword_tokens.py.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import AIRFLOW_ENV, REPO, VENV_BIN, describe_command, run_command
from tests.data import docstrings

pytestmark = pytest.mark.integration
DAY = docstrings.DAYS[0]
MAX_TOKENS = 48  # tests/data/pipelines/docstrings.yaml: fit_transform.text_max_tokens
LONG = ["lakeprep.long", "text", " ".join(["the string is split into words and joined again"] * 40)]


@pytest.fixture(scope="module")
def docstrings_run(airflow_db, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("docstrings-lake")
    docstrings.land(f"file://{root}", [DAY], extra_rows={DAY: [LONG]})
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "AIRFLOW_VAR_LAKEPREP_LAKE_ROOT": f"file://{root}",
        "LAKEPREP_PIPELINES_DIR": str(REPO / "tests" / "data" / "pipelines"),
    }
    result = run_command(
        [str(VENV_BIN / "airflow"), "dags", "test", "lakeprep_docstrings", DAY], env=env, timeout=900
    )
    out = result.stdout + result.stderr
    assert "state=success" in out, describe_command(result.args, "exit code 0", result.stdout, result.stderr)
    return root


def partition(root: Path, stage: str) -> Path:
    return root / stage / "docstrings" / f"dt={DAY}"


def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_str(
        docstrings.train_tokenizer(doc for _, _, doc in docstrings.shipped_rows()).decode()
    )


def test_the_day_keeps_the_text_and_the_fit_records_the_tokenizer_file(docstrings_run):
    prepared = [p for p in partition(docstrings_run, "sample").rglob("*.parquet")]
    assert prepared, f"no sampled rows under {partition(docstrings_run, 'sample')}"
    table = pq.read_table(prepared[0])
    assert str(table.schema.field("doc").type) == "string"  # the cut text, no regex tokens
    assert LONG[2] in pq.ParquetDataset(prepared).read(columns=["doc"]).column("doc").to_pylist()

    fit = partition(docstrings_run, "fit_transform")
    (entry,) = json.loads((fit / "transform.json").read_text())["text"]
    shipped = (docstrings_run / Path(*docstrings.TOKENIZER_PATH)).read_bytes()
    assert entry["encoding"] == "tokenizer" and entry["max_tokens"] == MAX_TOKENS
    assert entry["tokenizer_file"]["sha256"] == hashlib.sha256(shipped).hexdigest()
    assert (fit / entry["tokenizer_file"]["file"]).read_bytes() == shipped
    assert "vocabulary" not in entry  # nothing fitted from the rows


def test_the_days_truncation_is_counted_per_split_and_shown_in_the_run_summary(docstrings_run):
    report = json.loads((partition(docstrings_run, "sample") / "_lakeprep_report.json").read_text())
    cut = report["text_truncation"]["doc"]
    assert cut["max_tokens"] == MAX_TOKENS
    train = cut["splits"]["train"]
    assert train["rows"] == sum(report["splits"]["train"].values())
    # The long text alone loses all but MAX_TOKENS - 2 of its pieces ([CLS] and [SEP] kept).
    long_cut = len(tokenizer().encode(LONG[2], add_special_tokens=False).ids) - (MAX_TOKENS - 2)
    assert 1 <= train["rows_truncated"] < train["rows"] and train["tokens_cut"] > long_cut
    summary = (docstrings_run / "reports" / "docstrings" / f"dt={DAY}" / "summary.md").read_text()
    assert (
        f"text doc cut at {MAX_TOKENS} tokens by its tokenizer: train {train['rows_truncated']} of "
        f"{train['rows']} rows ({train['tokens_cut']} tokens cut)"
    ) in summary


def test_the_loader_gives_the_trainer_ids_and_attention_masks(docstrings_run):
    from lakeprep_train.dataset import RankBatches
    from lakeprep_train.manifest import load_manifest, with_transform_document

    manifest = with_transform_document(
        load_manifest(str(partition(docstrings_run, "export_shards") / "manifest.json"))
    )
    batches = list(RankBatches(manifest, "train", 0, with_ids=True))
    tok = tokenizer()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    rows = {}
    for batch in batches:
        mask = batch.attention_mask
        assert batch.text.shape[1:] == (1, MAX_TOKENS) and mask.shape == batch.text.shape
        for row_id, ids, m in zip(batch.ids, batch.text[:, 0].tolist(), mask[:, 0].tolist(), strict=True):
            rows[row_id] = (ids, m)
    assert rows, "no train rows"
    for ids, m in rows.values():
        length = sum(m)
        assert ids[0] == cls and ids[length - 1] == sep and m == [1] * length + [0] * (MAX_TOKENS - length)
    ids, m = rows[LONG[0]]  # the sample (seed 7) puts it in train: cut at the limit, [SEP] last
    assert sum(m) == MAX_TOKENS and ids[-1] == sep


def test_the_model_folder_alone_predicts_families_of_unseen_words(docstrings_run, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(partition(docstrings_run, "models"), model)
    unseen = "Quuxify the frobnicated zorblax dictionaries into threadsafe hyperqueues"
    raw = tmp_path / "input.csv"
    with raw.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(docstrings.HEADER)
        writer.writerows([LONG, ["made.up", "concurrency", unseen]])
    from lakeprep_train.transform import apply_transform, load_transform

    doc = load_transform(str(model / "transform.json"))  # the tokenizer file beside it, checked
    ids = apply_transform({"doc": [unseen]}, doc)["txt__doc"][0]
    unk = tokenizer().token_to_id("[UNK]")
    pieces = [i for i in ids.tolist() if i != 0]
    assert unk not in pieces and len(pieces) > len(unseen.split()) + 2  # words split into pieces

    out = tmp_path / "predictions.jsonl"
    argv = [sys.executable, "-m", "lakeprep_train.predict", "--model", str(model), "--input", str(raw)]
    result = run_command(
        [*argv, "--output", str(out)], timeout=300, env={**os.environ, **AIRFLOW_ENV}, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    predictions = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(predictions) == 2 and all(p["prediction"] in docstrings.FAMILIES for p in predictions)
