"""benchmarks.subword: both ways encode the same texts to the same shape, and the figures add up."""

from __future__ import annotations

import json

import pyarrow as pa

from benchmarks import subword


def test_both_ways_give_fixed_length_ids_of_the_same_texts():
    texts = pa.array(subword.corpus(50))
    assert len(set(texts.to_pylist())) == 50  # distinct: no way encodes a repeated text for free
    out = {name: run() for name, run in subword.ways(texts, 12).items()}
    assert set(out) == {"tokenizer", "regex"}
    for ids in out.values():
        assert ids.shape == (50, 12) and (ids != 0).any()


def test_the_run_reports_rows_and_ids_per_cpu_second(tmp_path):
    path = tmp_path / "subword.json"
    results = subword.main(["--rows", "40", "--max-tokens", "8", "--reps", "1", "--out", str(path)])
    assert json.loads(path.read_text()) == results
    for way in results["ways"].values():
        assert way["rows"] == 40 and 0 < way["ids"] <= 40 * 8
        assert way["ids_per_cpu_s"] == way["ids"] / way["cpu_s"]
