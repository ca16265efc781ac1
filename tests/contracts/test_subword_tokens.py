"""Subword tokens: a Hugging Face tokenizer file applied by the one transform implementation.

The tokenizer is trained here (WordPiece, ``tokenizers``' own trainer) on a real corpus
that ships with Python: the docstrings of standard-library modules. No labelled text set
ships inside a PyPI wheel without a download, so the texts encoded are docstrings too.
"""

from __future__ import annotations

import hashlib
import inspect
import json

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_contracts import encode, window_fit

MAX_TOKENS = 12


def stdlib_docstrings() -> list[str]:
    import collections
    import json as json_module
    import os
    import pathlib
    import re
    import string

    texts = []
    for module in (os, string, json_module, collections, re, pathlib):
        for _, obj in sorted(vars(module).items()):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc:
                texts.append(doc)
    return texts


@pytest.fixture(scope="module")
def tokenizer_json() -> bytes:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(stdlib_docstrings(), trainer=trainer)
    tok.post_processor = processors.BertProcessing(
        ("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]"))
    )
    return tok.to_str().encode("utf-8")


def entry(data: bytes) -> dict:
    facts = encode.tokenizer_facts(data, "test")
    return window_fit.text_entries(
        [{"name": "doc", "encoding": "tokenizer", "max_tokens": MAX_TOKENS}], {}, {"doc": facts}
    )[0]


def loaded(data: bytes) -> dict:
    spec = entry(data)
    doc = {"text": [spec]}
    return encode.with_tokenizers(doc, lambda name: data, "transform.json")["text"][0]


def test_entry_records_the_file_and_its_sha256(tokenizer_json: bytes) -> None:
    spec = entry(tokenizer_json)
    assert spec["tokenizer_file"] == {
        "file": "tokenizer__doc.json",
        "sha256": hashlib.sha256(tokenizer_json).hexdigest(),
        "vocab_size": spec["cardinality"],
    }
    assert spec["cardinality"] > 100 and spec["padding_id"] == 0 and "tokenizer" not in spec


def test_ids_are_fixed_length_with_special_tokens_padding_and_mask(tokenizer_json: bytes) -> None:
    from tokenizers import Tokenizer

    spec = loaded(tokenizer_json)
    tok = Tokenizer.from_str(tokenizer_json.decode())
    texts = pa.array(["Return a path.", None, "zyxquartzophone", ""])
    ids = encode.encode_subwords(texts, spec)
    assert ids.shape == (4, MAX_TOKENS) and ids.dtype == np.int32
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    short = tok.encode("Return a path.").ids
    assert ids[0].tolist() == short + [0] * (MAX_TOKENS - len(short))
    assert ids[0, 0] == cls and ids[0, len(short) - 1] == sep
    # A null text and an empty one: [CLS] [SEP] then padding.
    assert ids[1].tolist() == ids[3].tolist() == [cls, sep] + [0] * (MAX_TOKENS - 2)
    # An unseen word becomes subword pieces, not one unknown id.
    pieces = [tok.id_to_token(int(i)) for i in ids[2] if i not in (0, cls, sep)]
    assert len(pieces) > 1 and any(p.startswith("##") for p in pieces) and "[UNK]" not in pieces
    mask = encode.attention_mask(ids, spec)
    assert mask.tolist()[1] == [1, 1] + [0] * (MAX_TOKENS - 2)
    assert mask[0].sum() == len(short)


def test_a_text_longer_than_the_limit_is_cut_and_counted(tokenizer_json: bytes) -> None:
    from tokenizers import Tokenizer

    spec = loaded(tokenizer_json)
    long = inspect.getdoc(json.dumps)
    full = Tokenizer.from_str(tokenizer_json.decode()).encode(long, add_special_tokens=False).ids
    assert len(full) > MAX_TOKENS
    texts = pa.array([long, "a path", long])
    ids = encode.encode_subwords(texts, spec)
    assert ids[0, -1] != 0  # full to the last position, ending with [SEP]
    assert ids[0, 1 : MAX_TOKENS - 1].tolist() == full[: MAX_TOKENS - 2]
    counts = encode.truncation(texts, spec)
    assert counts == {"rows_truncated": 2, "tokens_cut": 2 * (len(full) - (MAX_TOKENS - 2))}


def test_encode_dispatches_on_the_encoding(tokenizer_json: bytes) -> None:
    spec = loaded(tokenizer_json)
    doc = {"numeric": [], "categorical": [], "text": [spec], "pca": None}
    out = encode.encode({"doc": pa.array(["a path", "the string"])}, doc)
    assert (
        out[spec["output"]].tolist()
        == encode.encode_subwords(pa.array(["a path", "the string"]), spec).tolist()
    )


def test_a_changed_or_unloaded_tokenizer_file_is_refused(tokenizer_json: bytes) -> None:
    spec = entry(tokenizer_json)
    other = tokenizer_json.replace(b'"[UNK]"', b'"[UNKNOWN]"', 1)
    with pytest.raises(encode.TransformError, match="tokenizer__doc.json has sha256"):
        encode.with_tokenizers({"text": [spec]}, lambda name: other, "m/transform.json")
    with pytest.raises(encode.TransformError, match="cannot read its tokenizer file"):
        encode.with_tokenizers({"text": [spec]}, lambda name: open("/nonexistent/x", "rb").read(), "m")
    with pytest.raises(encode.TransformError, match="not loaded"):
        encode.encode_subwords(pa.array(["a"]), spec)


def test_a_tokenizer_that_pads_with_another_id_is_refused(tokenizer_json: bytes) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json.decode())
    tok.enable_padding(pad_id=3, pad_token="[SEP]")
    with pytest.raises(encode.TransformError, match="padding token has id 3"):
        encode.tokenizer_facts(tok.to_str().encode(), "t.json")
    with pytest.raises(encode.TransformError, match="not a Hugging Face tokenizer file"):
        encode.tokenizer_facts(b'{"vocab": 1}', "t.json")


def test_the_trainer_checks_a_tokenizer_entry_by_its_file_not_a_vocabulary(tokenizer_json: bytes) -> None:
    from lakeprep_train import transform as tf
    from tests.training.transform_doc import make_doc

    spec = entry(tokenizer_json)
    doc = tf.check_document(make_doc(texts=[spec]), "m/transform.json")  # no vocabulary, buckets or regex
    assert doc["text"][0]["tokenizer_file"] == spec["tokenizer_file"]
    bad = dict(spec, cardinality=spec["cardinality"] + 1)
    with pytest.raises(
        tf.TransformError, match=r"text\[0\] \(doc\)\.cardinality: .* != tokenizer_file.vocab_size"
    ):
        tf.check_document(make_doc(texts=[bad]), "m/transform.json")
