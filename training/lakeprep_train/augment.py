"""Read-time augmentation: the synthetic rows of a prepared export, made as the loader reads them.

A prepared export names each balanced train row `synthetic_per_row` more times, in
entries marked `synthetic: k` (docs/MANIFEST.md). The loader encodes those rows like any
other, then augments them here, on the fitted features:

- `jitter`: Gaussian noise of `jitter_sigma` added to every numeric feature (the
  transform's outputs, so in units of the scaled feature);
- `text`: each token dropped with probability `token_dropout`; the tokens left close up
  to the front of the sequence and the rest is padding (id 0), as the encoded export's
  synthetic rows are built;
- `smote`: the numerics moved a random share of the way towards a same-class neighbour
  among the rows read together (`smote`; categoricals and text stay the row's).

The draws come from a generator seeded by the run's seed, the **epoch**, the entry's
synthetic copy `k`, its file and row group: a new augmentation every epoch, the same one
for a row at the same (seed, epoch) on any machine, whatever threads read ahead, and for
`jitter` and `text` at any world size (SMOTE's neighbours are the rows a rank reads of
the group, so they follow the world size).
Categoricals, labels and ids are the real row's.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

METHODS = ("jitter", "text", "smote")


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """How to augment one epoch's synthetic rows."""

    method: str
    seed: int
    epoch: int
    jitter_sigma: float = 0.0
    token_dropout: float = 0.0
    smote_candidates: int = 16

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
            smote_candidates=int(balance.get("smote_candidates", 16)),
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
        elif self.method == "smote":
            out["numeric"] = smote(block["numeric"], block["label"], copy, self.smote_candidates, rng)
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


def smote(
    numeric: np.ndarray, labels: np.ndarray, copy: int, candidates: int, rng: np.random.Generator
) -> np.ndarray:
    """SMOTE over the rows read together: each row moved a random share `lambda` of the way
    towards a same-class neighbour.

    The rows of each class are dealt at random into groups of at most `candidates` rows
    (the bounded candidate set of the Spark export, so the cost stays linear); a row's
    neighbours are its group's other rows, nearest first (Euclidean on the fitted
    numerics, ties by position), and its synthetic copy `copy` takes the
    `(copy - 1) mod (group size - 1)`-th nearest. A row alone in its group (a class of
    one row in the read) stays as it is.
    """
    out = numeric.astype(np.float64, copy=True)
    lam = rng.random(len(numeric))
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        rows = rows[rng.permutation(len(rows))]
        n_groups = -(-len(rows) // candidates)
        for g in range(n_groups):
            group = np.sort(rows[g::n_groups])
            if len(group) < 2:
                continue
            x = numeric[group].astype(np.float64)
            distance = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=-1)
            np.fill_diagonal(distance, np.inf)
            nearest = np.argsort(distance, axis=1, kind="stable")
            neighbour = x[nearest[:, (copy - 1) % (len(group) - 1)]]
            out[group] = x + lam[group, None] * (neighbour - x)
    return out.astype(numeric.dtype)
