from __future__ import annotations

import torch

from lakeprep_train.manifest import Feature
from lakeprep_train.model import TabularMLP, embedding_dim

FEATURES = [
    Feature("num__x", "numeric", "float32", ()),
    Feature("num__y", "numeric", "float32", ()),
    Feature("cat__c", "categorical", "int32", (), cardinality=1024),
    Feature("txt__t", "text", "int32", (4,), vocab_size=50),
]


def inputs(batch: int = 5):
    return torch.randn(batch, 2), torch.randint(0, 1024, (batch, 1)), torch.randint(0, 50, (batch, 1, 4))


def test_binary_model_returns_one_logit_per_row():
    assert TabularMLP(FEATURES, 2)(*inputs()).shape == (5,)


def test_multiclass_model_returns_a_logit_per_class():
    assert TabularMLP(FEATURES, 4)(*inputs()).shape == (5, 4)


def test_embedding_widths_are_capped():
    model = TabularMLP(FEATURES, 2)
    assert model.categorical[0].embedding_dim == embedding_dim(1024) == 16
    assert embedding_dim(3) == 3


def test_text_padding_does_not_change_the_output():
    torch.manual_seed(0)
    model = TabularMLP(FEATURES, 2).eval()
    numeric, categorical, _ = inputs(1)
    short = torch.tensor([[[5, 9, 0, 0]]])
    shuffled_padding = torch.tensor([[[0, 5, 0, 9]]])
    assert torch.allclose(model(numeric, categorical, short), model(numeric, categorical, shuffled_padding))
