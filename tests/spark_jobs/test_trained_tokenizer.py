"""A tokenizer trained on the window: the days count words, the fit merges them and trains.

Two sampled days of standard-library docstrings (tests/data/docstrings.py) through the
real statistics (`fit_statistics.split_statistics`) and `fit_transform.run`.
"""

from __future__ import annotations

import json
from collections import Counter

import regex

from lakeprep_contracts import encode
from lakeprep_contracts.text import TOKENIZER
from lakeprep_jobs import fit_transform
from tests.data import docstrings
from tests.spark_jobs.window_data import DAY_3, fit_params, land_day

SCHEMA = "id string, label int, x double, c string, t string, split string"
ONLY_IN_VALIDATION = "quuxification"


def params():
    text = {"name": "t", "encoding": "tokenizer", "tokenizer_model": "wordpiece", "min_frequency": 1}
    return fit_params(text=[{**text, "vocab_size": 300, "max_tokens": 16}])


def days(spark, root):
    docs = [doc for _, _, doc in docstrings.shipped_rows()][:60]
    inputs = []
    for d, day in enumerate(("2013-01-01", DAY_3)):
        rows = [
            (f"{day}-{i}", i % 2, float(i), "a", doc, "train" if i % 5 else "validation")
            for i, doc in enumerate(docs[d * 30 : (d + 1) * 30])
        ]
        rows.append((f"{day}-v", 0, 1.0, "a", f"{ONLY_IN_VALIDATION} " * 50, "validation"))
        inputs.append(land_day(spark, root, day, rows, SCHEMA, params()))
    train_text = [doc for i, doc in enumerate(docs) if i % 30 % 5]
    return inputs, train_text


def test_the_fit_trains_the_tokenizer_on_the_train_words_of_every_day(spark, tmp_path):
    inputs, train_text = days(spark, tmp_path)
    out = tmp_path / "fit"
    report = fit_transform.run(spark, inputs, f"file://{out}", params())

    (entry,) = json.loads((out / "transform.json").read_text())["text"]
    data = (out / entry["tokenizer_file"]["file"]).read_bytes()
    assert entry["encoding"] == "tokenizer" and entry["cardinality"] == 300
    words = Counter(w for doc in train_text for w in regex.split(TOKENIZER["pattern"], doc.lower()) if w)
    trained = report["tokenizers_trained"]["t"]
    assert (trained["model"], trained["vocab_size"]) == ("wordpiece", 300)
    assert trained["occurrences"] == sum(words.values())  # the train rows of both days, no more
    vocabulary = json.loads(data)["model"]["vocab"]
    assert ONLY_IN_VALIDATION not in vocabulary and "the" in vocabulary

    loaded = encode.with_tokenizers({"text": [entry]}, lambda name: data, "fit")["text"][0]
    ids = encode.encode_subwords(["Return the path"], loaded)
    assert ids.shape == (1, 16) and ids[0, 0] == vocabulary["[CLS]"] and vocabulary["[UNK]"] not in ids

    fit_transform.run(spark, inputs, f"file://{out}", params())  # run twice: the same file
    assert (out / entry["tokenizer_file"]["file"]).read_bytes() == data
