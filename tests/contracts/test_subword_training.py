"""A tokenizer trained from word counts: BPE merges in a fixed order, bounded, the same file every run."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter

import pytest
import regex

from lakeprep_contracts import encode
from lakeprep_contracts.subword_training import learn_merges, train_from_counts
from lakeprep_contracts.text import TOKENIZER
from tests.conftest import REPO
from tests.data import docstrings


def docstring_words() -> Counter:
    return Counter(
        w
        for _, _, doc in docstrings.shipped_rows()
        for w in regex.split(TOKENIZER["pattern"], doc.lower())
        if w
    )


def test_the_most_frequent_pair_merges_first_and_ties_go_by_the_pairs_text():
    words = [("low", 5), ("lower", 2), ("newest", 6), ("widest", 3)]
    base, none = learn_merges(words, 0)  # special tokens and the alphabet alone
    assert none == [] and {"l", "n", "w", "##o", "##t", ",", "!"} <= set(base)
    vocab, merges = learn_merges(words, len(base) + 3)
    # (##e, ##s) and (##s, ##t) both occur 9 times: ##e sorts first; then ##es + ##t (9).
    assert merges[:3] == [("##e", "##s"), ("##es", "##t"), ("##o", "##w")]  # 7 ties with (l, ##o)
    assert vocab[:4] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] and vocab[: len(base)] == base
    assert vocab[-3:] == ["##es", "##est", "##ow"]


@pytest.mark.parametrize("model", ["wordpiece", "bpe"])
def test_a_trained_file_splits_unseen_words_into_pieces_and_knows_punctuation(model):
    from tokenizers import Tokenizer

    data, trained = train_from_counts(docstring_words(), model, 500)
    assert trained["vocab_size"] == 500 and trained["words_left_out"] == 0
    facts = encode.tokenizer_facts(data, "trained")  # a file lakeprep takes: [PAD] is id 0
    assert facts["vocab_size"] == 500
    tokens = Tokenizer.from_str(data.decode()).encode("Return the Frobnicated path, quickly!").tokens
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "[UNK]" not in tokens
    assert "return" in tokens and "," in tokens and any(t.startswith("##") for t in tokens)


def test_training_is_the_same_in_every_process():
    script = (
        "import hashlib; from tests.contracts.test_subword_training import docstring_words; "
        "from lakeprep_contracts.subword_training import train_from_counts; "
        "print(*(hashlib.sha256(train_from_counts(docstring_words(), m, 400)[0]).hexdigest() "
        "for m in ('wordpiece', 'bpe')))"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    here = " ".join(
        hashlib.sha256(train_from_counts(docstring_words(), m, 400)[0]).hexdigest()
        for m in ("wordpiece", "bpe")
    )
    assert runs == {here + "\n"}


def test_rare_words_are_left_out_and_nothing_to_learn_is_refused():
    _, trained = train_from_counts({"path": 3, "zyx": 1}, "wordpiece", 100, min_frequency=2)
    assert (trained["words"], trained["occurrences"], trained["words_below_min_frequency"]) == (1, 3, 1)
    with pytest.raises(ValueError, match="no word of the window's train split occurs 2 times or more"):
        train_from_counts({"zyx": 1}, "wordpiece", 100, min_frequency=2)
    with pytest.raises(ValueError, match="tokenizer_model 'unigram' must be one of"):
        train_from_counts({"zyx": 1}, "unigram", 100)
