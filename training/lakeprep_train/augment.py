"""Read-time augmentation: the synthetic rows of a prepared export, made as the loader reads them.

A prepared export names each balanced train row `synthetic_per_row` more times, in
entries marked `synthetic: k` (docs/MANIFEST.md). The loader encodes those rows like any
other, then augments them here, on the fitted features:

- `jitter`: Gaussian noise of `jitter_sigma` added to every numeric feature (the
  transform's outputs, so in units of the scaled feature);
- `text`: each token dropped with probability `token_dropout`; the tokens left close up
  to the front of the sequence and the rest is padding (id 0), as the encoded export's
  synthetic rows are built.

The draws come from a generator seeded by the run's seed, the **epoch**, the entry's
synthetic copy `k`, its file and row group: a new augmentation every epoch, the same one
for a row at the same (seed, epoch) on any machine and any world size, whatever threads
read ahead.
Categoricals, labels and ids are the real row's.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

METHODS = ("jitter", "text")


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """How to augment one epoch's synthetic rows."""

    method: str
    seed: int
    epoch: int
    jitter_sigma: float = 0.0
    token_dropout: float = 0.0

    @classmethod
    def of(cls, balance: Mapping[str, Any] | None, *, seed: int, epoch: int) -> Augmentation | None:
        """From a manifest's `balance` (None: nothing to augment)."""
        method = (balance or {}).get("augment", "none")
        if method not in METHODS:
            return None
        return cls(
            method,
            seed,
            epoch,
            jitter_sigma=float(balance.get("jitter_sigma", 0.0)),
            token_dropout=float(balance.get("token_dropout", 0.0)),
        )

    def apply(
        self,
        block: dict[str, np.ndarray],
        copy: int,
        path: str,
        group_start: int,
        first: int,
        group_rows: int,
    ) -> dict[str, np.ndarray]:
        """`block`, rows `first`.. of the row group at row `group_start` of `path` (of
        `group_rows` rows), read as synthetic copy `copy`, augmented.

        The draws are made for the whole row group and sliced, so a row gets the same
        augmentation however the ranks' reads cut the group.
        """
        seed = [self.seed, self.epoch, copy, zlib.crc32(path.encode("utf-8")), group_start]
        rng = np.random.default_rng(seed)
        rows = slice(first, first + len(block["label"]))
        out = dict(block)
        if self.method == "jitter":
            numeric = block["numeric"]
            noise = rng.standard_normal((group_rows, numeric.shape[1]))[rows]
            out["numeric"] = (numeric + self.jitter_sigma * noise).astype(numeric.dtype)
        else:
            text = block["text"]
            draws = rng.random((group_rows, *text.shape[1:]))[rows]
            out["text"] = drop_tokens(text, draws >= self.token_dropout)
        return out


def drop_tokens(text: np.ndarray, survives: np.ndarray) -> np.ndarray:
    """`text` ([rows, features, length] ids, 0 = padding) keeping the real tokens where
    `survives`, moved to the front in their order; the rest is padding."""
    kept = (text != 0) & survives
    # A stable sort of "dropped" (False first) moves the kept tokens to the front in order.
    order = np.argsort(~kept, axis=-1, kind="stable")
    return np.take_along_axis(np.where(kept, text, 0), order, axis=-1).astype(text.dtype)
