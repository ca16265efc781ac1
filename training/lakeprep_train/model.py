"""The demo model: an MLP over numerics, categorical embeddings and bags of text tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from lakeprep_train.manifest import Feature


HIDDEN = (128, 64)  # the demo model's hidden layers


def embedding_dim(cardinality: int) -> int:
    """A width that grows slowly with the number of ids, capped at 16 for small tables."""
    return max(2, min(16, round(1.6 * cardinality**0.56)))


class TabularMLP(nn.Module):
    """Embeddings per categorical and per text feature, concatenated with numerics.

    Categorical id 0 means "missing" and gets its own learned vector; text id 0 is
    padding and is left out of the mean (``EmbeddingBag(padding_idx=0)``). Two classes
    give one logit (for ``BCEWithLogits``), more give one logit per class (softmax).
    """

    def __init__(
        self,
        features: Sequence[Feature],
        num_classes: int,
        *,
        hidden: Sequence[int] = HIDDEN,
        dropout: float = 0.1,
        regression: bool = False,
    ) -> None:
        super().__init__()
        # A continuous label: one output, the standardised target (num_classes are its bins).
        self.regression = regression
        if num_classes < 2:
            raise ValueError(f"num_classes {num_classes} must be at least 2")
        self.num_classes = num_classes
        self.n_numeric = sum(f.role == "numeric" for f in features)
        self.categorical = nn.ModuleList(
            nn.Embedding(f.cardinality, embedding_dim(f.cardinality))
            for f in features
            if f.role == "categorical"
        )
        self.text = nn.ModuleList(
            nn.EmbeddingBag(f.vocab_size, embedding_dim(f.vocab_size), mode="mean", padding_idx=0)
            for f in features
            if f.role == "text"
        )
        width = (
            self.n_numeric
            + sum(e.embedding_dim for e in self.categorical)
            + sum(e.embedding_dim for e in self.text)
        )
        layers: list[nn.Module] = []
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        layers.append(nn.Linear(width, 1 if num_classes == 2 or regression else num_classes))
        self.mlp = nn.Sequential(*layers)

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Logits: ``[B]`` for two classes (or the standardised target of a regression),
        ``[B, num_classes]`` otherwise."""
        parts = [numeric]
        parts += [emb(categorical[:, j]) for j, emb in enumerate(self.categorical)]
        parts += [bag(text[:, j, :]) for j, bag in enumerate(self.text)]
        logits = self.mlp(torch.cat(parts, dim=1))
        return logits.squeeze(1) if self.num_classes == 2 or self.regression else logits
