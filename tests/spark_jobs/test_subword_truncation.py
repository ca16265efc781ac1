"""The day's truncation by a tokenizer file, per split, counted on the executors.

The tokenizer is trained on standard-library docstrings (tests/data/docstrings.py); the
expected counts come from the tokenizer run without truncation, not from the code under
test.
"""

from __future__ import annotations

import inspect
import json

import pytest

from lakeprep_contracts.encode import TransformError
from lakeprep_jobs.lake import SparkLake
from lakeprep_jobs.subword_truncation import day_truncation
from tests.data import docstrings

MAX_TOKENS = 10  # [CLS], 8 text tokens, [SEP]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_bytes(docstrings.train_tokenizer(doc for _, _, doc in docstrings.shipped_rows()))
    return f"file://{path}"


def test_rows_and_tokens_cut_are_counted_per_split(spark, tokenizer_file):
    from tokenizers import Tokenizer

    long = inspect.getdoc(json.dumps)
    rows = spark.createDataFrame(
        [("1", "train", long), ("2", "train", "a path"), ("3", "train", None), ("4", "test", long)],
        "id string, split string, doc string",
    ).repartition(2)
    texts = [{"name": "doc", "tokenizer": tokenizer_file, "max_tokens": MAX_TOKENS}]
    report = day_truncation(SparkLake(spark), rows, texts)["doc"]

    tok = Tokenizer.from_str(open(tokenizer_file.removeprefix("file://")).read())
    past = len(tok.encode(long, add_special_tokens=False).ids) - (MAX_TOKENS - 2)
    assert past > 0
    assert report["splits"] == {
        "train": {"rows": 3, "rows_truncated": 1, "tokens_cut": past},
        "validation": {"rows": 0, "rows_truncated": 0, "tokens_cut": 0},
        "test": {"rows": 1, "rows_truncated": 1, "tokens_cut": past},
    }
    assert (report["max_tokens"], report["tokenizer"]) == (MAX_TOKENS, tokenizer_file)
    assert len(report["sha256"]) == 64


def test_a_missing_or_broken_tokenizer_file_is_refused_naming_it(spark, tmp_path):
    rows = spark.createDataFrame([("1", "train", "a")], "id string, split string, doc string")
    missing = f"file://{tmp_path}/none.json"
    with pytest.raises(TransformError, match=r"text 'doc': no tokenizer file at .*none.json"):
        day_truncation(SparkLake(spark), rows, [{"name": "doc", "tokenizer": missing, "max_tokens": 4}])
    (tmp_path / "bad.json").write_text('{"vocab": 1}')
    bad = f"file://{tmp_path}/bad.json"
    with pytest.raises(TransformError, match="bad.json: not a Hugging Face tokenizer file"):
        day_truncation(SparkLake(spark), rows, [{"name": "doc", "tokenizer": bad, "max_tokens": 4}])
