"""A subword tokenizer trained on the window's train split, from the days' merged word counts.

A text column of `encoding: tokenizer` with `tokenizer_model: wordpiece` (or `bpe`) and no
tokenizer file: each sampled day counts the words of its texts per split in its
`_fit_statistics.json` (the regex tokenizer's words, `lakeprep_contracts.text.TOKENIZER`,
as a vocab-encoded text counts its tokens), the window's fit merges the train split's
counts and learns subword merges from them here: the window's rows are never read again.
The result is an ordinary Hugging Face tokenizer.json (BERT-style: lowercased,
`[CLS] ... [SEP]`, `##` continuation pieces), which then serves as a shipped file does
(docs/TRANSFORM.md).

Why not `tokenizers`' own trainers: they are not deterministic across processes. Their
character ids come from a hash map with a per-process seed, so merges of equal counts
are taken in another order each run (measured: WordPiece's vocabulary and BPE's merge
order differed in each of 3 runs on the same counts), and a rerun of the fit must give
the same file. Here the merges are BPE's (the most frequent adjacent pair of symbols,
weighted by word counts), ties broken by the pair's text, ids given in vocabulary order.

- Bounded: the `MAX_WORDS` most frequent words (count descending, then word) are learned
  from; the rest are counted in `trained.words_left_out`. Time grows with the distinct
  words and the vocabulary size, not the window's rows.
- What the counts cannot hold: punctuation and letter case, which the regex words drop.
  The file lowercases (`BertNormalizer`, as the words are) and its alphabet holds ASCII
  punctuation, so serving never meets an unknown punctuation character.
"""

from __future__ import annotations

import heapq
import string
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

MODELS = ("wordpiece", "bpe")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")  # [PAD] first: lakeprep pads with id 0
PREFIX = "##"  # a piece that continues a word
MAX_WORDS = 50_000
MAX_WORD_CHARS = 100  # WordPiece's max_input_chars_per_word: a longer word is [UNK]


def trains_tokenizer(text: Mapping[str, Any]) -> bool:
    """Whether a text feature's settings ask for a tokenizer trained on the window."""
    return bool(text.get("tokenizer_model"))


def _pieces(counts: Mapping[str, int], min_frequency: int) -> tuple[list[tuple[str, int]], int, int]:
    """(word as the tokenizer's pre-tokenizer splits it, count) of the words learned from,
    the distinct words below ``min_frequency`` and those beyond MAX_WORDS."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    merged: dict[str, int] = defaultdict(int)
    rare = 0
    for word, n in counts.items():
        if n < min_frequency:
            rare += 1
            continue
        for piece, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(word)):
            if len(piece) <= MAX_WORD_CHARS:
                merged[piece] += int(n)
    ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:MAX_WORDS], rare, max(0, len(ranked) - MAX_WORDS)


def learn_merges(words: list[tuple[str, int]], vocab_size: int) -> tuple[list[str], list[tuple[str, str]]]:
    """(vocabulary in id order, merges in order): BPE over ``words`` with their counts.

    The vocabulary starts with the special tokens, then the alphabet (each first letter
    as itself, each later one as ``##letter``, ASCII punctuation) in sorted order, then one
    entry per merge until ``vocab_size`` entries. The most frequent adjacent pair is merged
    first; equal counts go in the order of the pair's text.
    """
    symbols = [[w[0], *(PREFIX + c for c in w[1:])] for w, _ in words]
    freq = [n for _, n in words]
    alphabet = sorted({s for word in symbols for s in word} | set(string.punctuation))
    vocab = list(SPECIAL_TOKENS) + [s for s in alphabet if s not in SPECIAL_TOKENS]
    known = set(vocab)
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, word in enumerate(symbols):
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += freq[i]
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pairs.get(pair, 0) != -negative or not -negative:
            continue  # a stale entry: the pair's count changed since it was pushed
        a, b = pair
        joined = a + b[len(PREFIX) :]
        merges.append(pair)
        if joined not in known:
            known.add(joined)
            vocab.append(joined)
        changed: set[tuple[str, str]] = set()
        for i in sorted(where.pop(pair)):
            word, n = symbols[i], freq[i]
            for old in zip(word, word[1:], strict=False):
                pairs[old] -= n
                changed.add(old)
            out, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and word[k] == a and word[k + 1] == b:
                    out.append(joined)
                    k += 2
                else:
                    out.append(word[k])
                    k += 1
            symbols[i] = out
            for new in zip(out, out[1:], strict=False):
                pairs[new] += n
                where[new].add(i)
                changed.add(new)
        for p in changed:
            if pairs[p] > 0:
                heapq.heappush(heap, (-pairs[p], p))
        pairs.pop(pair, None)
    return vocab, merges


def train_from_counts(
    counts: Mapping[str, int], model: str, vocab_size: int, *, min_frequency: int = 1
) -> tuple[bytes, dict[str, Any]]:
    """(the tokenizer.json, what it was trained on) from the window's word -> count.

    :raises ValueError: an unknown model, or no word with ``min_frequency`` occurrences.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    if model not in MODELS:
        raise ValueError(f"tokenizer_model {model!r} must be one of {list(MODELS)}")
    words, rare, left_out = _pieces(counts, min_frequency)
    if not words:
        raise ValueError(
            f"no word of the window's train split occurs {min_frequency} times or more "
            f"({len(counts)} distinct words): a tokenizer cannot be trained on nothing; lower "
            "min_frequency, widen window.days, or name a tokenizer file (transform.tokenizer)"
        )
    vocab, merges = learn_merges(words, vocab_size)
    ids = {token: i for i, token in enumerate(vocab)}
    if model == "wordpiece":
        tokenizer = Tokenizer(
            models.WordPiece(ids, unk_token="[UNK]", max_input_chars_per_word=MAX_WORD_CHARS)
        )
    else:
        tokenizer = Tokenizer(models.BPE(ids, merges, unk_token="[UNK]", continuing_subword_prefix=PREFIX))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(("[SEP]", ids["[SEP]"]), ("[CLS]", ids["[CLS]"]))
    trained = {
        "model": model,
        "vocab_size": len(vocab),
        "merges": len(merges),
        "words": len(words),
        "occurrences": sum(n for _, n in words),
        "words_below_min_frequency": rare,
        "words_left_out": left_out,
    }
    return tokenizer.to_str().encode("utf-8"), trained
