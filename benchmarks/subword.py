"""Subword tokens against regex tokens: text to fixed-length ids, per CPU core.

    .venv/bin/python -m benchmarks.subword [--rows 20000] [--max-tokens 48] [--reps 3] [--out FILE]

The same texts both ways, each to `max_tokens` ids a row, the way lakeprep encodes them
where rows are read (`lakeprep_contracts.encode`):

- `tokenizer`: `encoding: tokenizer`, a WordPiece tokenizer.json (`tokenizers`, Rust):
  `encode.encode_subwords` on the cleaned strings;
- `regex`: `encoding: vocab`, the regex tokenizer (`lakeprep_train.transform.tokenize`, the
  Python mirror of preprocess's Spark `RegexTokenizer`) then `encode.encode_tokens`
  against a vocabulary of the texts' 4,096 most frequent tokens.

The texts are the standard-library docstrings of tests/data/docstrings.py (the subword
tokens' test set, its tokenizer trained on them as there), row i the docstring i modulo
their number with its row number appended, so every text is distinct (both encoders
work once per distinct text). `tokenizers` runs on one thread (TOKENIZERS_PARALLELISM
false, set before it is imported), so CPU seconds are one core's. Prints, per way, rows
and ids (positions that hold a token, not padding) per CPU second, the best of `reps`,
and the ratio; `--out` writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core: read when tokenizers starts its pool

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

VOCABULARY = 4096


def corpus(rows: int) -> list[str]:
    from tests.data import docstrings

    docs = [doc for _, _, doc in docstrings.shipped_rows()]
    return [f"{docs[i % len(docs)]} {i}" for i in range(rows)]


def subword_spec(max_tokens: int) -> dict[str, Any]:
    from lakeprep_contracts import encode, window_fit
    from tests.data import docstrings

    data = docstrings.train_tokenizer(doc for _, _, doc in docstrings.shipped_rows())
    entry = window_fit.text_entries(
        [{"name": "doc", "encoding": "tokenizer", "max_tokens": max_tokens}],
        {},
        {"doc": encode.tokenizer_facts(data, "benchmark")},
    )[0]
    return encode.with_tokenizers({"text": [entry]}, lambda name: data, "benchmark")["text"][0]


def regex_spec(texts: pa.Array, max_tokens: int) -> dict[str, Any]:
    from lakeprep_contracts.text import TOKENIZER
    from lakeprep_train.transform import tokenize

    counts = Counter(t for tokens in tokenize(texts, TOKENIZER).to_pylist() for t in tokens)
    vocabulary = [t for t, _ in counts.most_common(VOCABULARY)]
    return {"name": "doc", "encoding": "vocab", "vocabulary": vocabulary, "max_tokens": max_tokens}


def ways(texts: pa.Array, max_tokens: int) -> dict[str, Callable[[], np.ndarray]]:
    from lakeprep_contracts import encode
    from lakeprep_contracts.text import TOKENIZER
    from lakeprep_train.transform import tokenize

    subword, regex = subword_spec(max_tokens), regex_spec(texts, max_tokens)
    encode.load_tokenizer(encode._content(subword), max_tokens)  # parsed once, as a reader does
    return {
        "tokenizer": lambda: encode.encode_subwords(texts, subword),
        "regex": lambda: encode.encode_tokens(tokenize(texts, TOKENIZER), regex),
    }


def measure(run: Callable[[], np.ndarray], reps: int) -> dict[str, float]:
    """The best of ``reps`` runs: CPU and wall seconds, rows and ids (non-padding) out."""
    best: dict[str, float] | None = None
    for _ in range(reps):
        cpu, wall = time.process_time(), time.perf_counter()
        ids = run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if best is None or cpu < best["cpu_s"]:
            best = {"cpu_s": cpu, "wall_s": wall, "rows": len(ids), "ids": int(np.count_nonzero(ids))}
    assert best is not None
    best["rows_per_cpu_s"] = best["rows"] / best["cpu_s"]
    best["ids_per_cpu_s"] = best["ids"] / best["cpu_s"]
    return best


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    texts = pa.array(corpus(args.rows))
    results: dict[str, Any] = {"rows": args.rows, "max_tokens": args.max_tokens, "ways": {}}
    for name, run in ways(texts, args.max_tokens).items():
        run()  # warm-up: imports, the regex's compilation
        results["ways"][name] = measure(run, args.reps)
    tok, reg = results["ways"]["tokenizer"], results["ways"]["regex"]
    results["tokenizer_over_regex_rows_per_cpu_s"] = tok["rows_per_cpu_s"] / reg["rows_per_cpu_s"]
    for name, r in results["ways"].items():
        print(
            f"{name:9s} {r['rows_per_cpu_s']:>10,.0f} rows/CPU-s {r['ids_per_cpu_s']:>12,.0f} ids/CPU-s "
            f"({r['rows']} rows, {r['ids']} ids, {r['cpu_s']:.3f} CPU-s, {r['wall_s']:.3f} s wall)"
        )
    print(f"tokenizer / regex, rows per CPU second: {results['tokenizer_over_regex_rows_per_cpu_s']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
