"""Token lists as Arrow hands them to the encoder: sliced, null lists spanning values, large lists,
dictionary tokens, chunks; each row encoded as a per-row reference says (the first
``max_tokens`` token ids, 0-padded)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_contracts.encode import encode_tokens, hashed_ids, spark_xxhash64

WORDS = ["late", "storm", "rain", "737", "", None]  # "" and None inside a list: tokens all the same
VOCAB = {"name": "note", "encoding": "vocab", "vocabulary": ["late", "storm"], "max_tokens": 3}
HASHED = {"name": "note", "encoding": "hash", "buckets": 64, "max_tokens": 5}


def reference(rows: list[list[str | None] | None], spec: dict) -> np.ndarray:
    """One row at a time in Python: what docs/TRANSFORM.md says a text becomes."""
    out = np.zeros((len(rows), spec["max_tokens"]), dtype=np.int32)
    for i, tokens in enumerate(rows):
        for j, token in enumerate((tokens or [])[: spec["max_tokens"]]):
            if spec["encoding"] == "vocab":
                vocabulary = spec["vocabulary"]
                out[i, j] = vocabulary.index(token) + 2 if token in vocabulary else 1
            else:
                out[i, j] = hashed_ids(spark_xxhash64([token]), spec["buckets"])[0]
    return out


def lists(seed: int) -> tuple[pa.Array, list]:
    """A list array whose null rows still span values (Arrow allows it), and its rows."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 8, 40)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array([WORDS[i] for i in rng.integers(0, len(WORDS), int(offsets[-1]))], pa.string())
    null = rng.random(40) < 0.25
    array = pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(null))
    assert int(np.diff(offsets)[null].sum()) > 0  # the null rows hide tokens
    return array, array.to_pylist()


@pytest.mark.parametrize("spec", [VOCAB, HASHED], ids=["vocab", "hash"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_token_lists_encode_row_by_row_however_arrow_lays_them_out(spec, seed):
    array, rows = lists(seed)
    dictionary = pa.ListArray.from_arrays(
        array.offsets, array.values.dictionary_encode(), mask=array.is_null()
    )
    for layout in (
        array,
        array.slice(7, 21),  # offsets not starting at 0, values before and after
        array.slice(40),  # empty
        array.cast(pa.large_list(pa.string())).slice(3, 30),
        dictionary.slice(5, 30),  # tokens read with read_dictionary
        pa.chunked_array([array.slice(0, 9), array.slice(9)]),
    ):
        expected = reference(layout.to_pylist(), spec)
        got = encode_tokens(layout, spec)
        assert got.dtype == np.int32 and got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, expected)
    assert rows  # the reference saw rows, nulls among them
