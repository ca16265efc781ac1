"""How text becomes tokens: one tokenizer for preprocess, statistics and serving.

Spark ML's `RegexTokenizer(pattern=..., gaps=True, toLowercase=..., minTokenLength=...)`
on the Spark side; the `regex` package (which knows `\\p{L}`) on the serving side.
"""

from __future__ import annotations

TOKENIZER = {"pattern": r"[^\p{L}\p{N}]+", "lowercase": True, "min_token_length": 1}

# A text feature's `encoding` by a Hugging Face tokenizer file (`tokenizer.json`): preprocess
# keeps the cleaned text, and lakeprep_contracts.encode turns it into subword ids.
SUBWORD = "tokenizer"
