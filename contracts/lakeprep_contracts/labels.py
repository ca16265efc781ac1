"""The label's classes: what the spec declares, what the shards hold, one mapping for all.

`label.classes` lists the classes; their order gives each its id, 0..k-1, which is the
model's output index. Two kinds:

- **integer classes** (`[0, 1]`, `[1, 5, 9]`): the label column holds integers and the
  shards' `label` column holds the class itself (the trainer maps a value to its index).
- **named classes** (any other JSON scalars: `[Adelie, Chinstrap, Gentoo]`, `[true,
  false]`, a mix): validate compares the label's text (Spark's cast to string:
  `true`, `1.5`) with the classes' text, exactly (case and spaces count); preprocess
  writes the class's id into the shards' `label` column, so every later stage and the
  trainer see the integer classes `[0, 1, ..., k-1]`; the transform's `label.names`
  maps the ids back (serving and `predict` print names).

Both Spark (validate, preprocess) and the worker (serving, predict) call these functions,
so the mapping is declared here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def is_integer(classes: Sequence[Any]) -> bool:
    """Integer classes (bool is not an integer here: `true` is a name)."""
    return all(isinstance(c, int) and not isinstance(c, bool) for c in classes)


def class_text(value: Any) -> str:
    """A class as Spark's `CAST(label AS STRING)` writes it: `true`, `Adelie`, `3`, `1.5`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def stored_classes(classes: Sequence[Any]) -> list[int]:
    """The values of the prepared rows' `label` column: integer classes as declared, or the ids."""
    return list(classes) if is_integer(classes) else list(range(len(classes)))


def names(classes: Sequence[Any]) -> list[Any] | None:
    """Named classes in id order (the id -> class map), or None for integer classes."""
    return None if is_integer(classes) else list(classes)


def ids_by_text(classes: Sequence[Any]) -> dict[str, int]:
    """Class text -> id, for a label read as text (named classes)."""
    return {class_text(c): i for i, c in enumerate(classes)}


def problems(classes: Sequence[Any]) -> list[str]:
    """What makes a list of classes unusable: two classes with the same text (`1` and `"1"`)."""
    seen: dict[str, Any] = {}
    out = []
    for c in classes:
        text = class_text(c)
        if text in seen:
            out.append(f"classes {seen[text]!r} and {c!r} are both {text!r} as the label's text")
        seen.setdefault(text, c)
    return out


def stored_keys(classes: Sequence[Any], per_class: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A per-class knob (`class_fractions`, `class_counts`: keys are the classes' text) keyed
    by the stored label instead (`"0"` for `Adelie`), as the Spark stages count classes.

    :raises ValueError: a key that is not a class, naming the knob and the classes.
    """
    if is_integer(classes):
        return dict(per_class)
    ids = ids_by_text(classes)
    unknown = sorted(k for k in per_class if class_text(k) not in ids)
    if unknown:
        raise ValueError(f"{where} names classes {unknown} not in label.classes {list(classes)}")
    return {str(ids[class_text(k)]): v for k, v in per_class.items()}


# A continuous label (`label: {column, type: continuous, bins: 4}`): a numeric target.
# Preprocess writes the value as the prepared rows' `target` (double) and its quantile bin
# of the day, 0..bins-1, as `label`: the bins are the classes every stage before the
# trainer stratifies, samples and counts (exactly per bin, per day).
CONTINUOUS = "continuous"
TARGET = "target"
DEFAULT_BINS = 4


def is_continuous(label: Mapping[str, Any]) -> bool:
    """The spec's `label` section declares a numeric target (`type: continuous`)."""
    return label.get("type") == CONTINUOUS


def bins(label: Mapping[str, Any]) -> int:
    """The quantile bins of a continuous label (its strata)."""
    return int(label.get("bins", DEFAULT_BINS))


def fitted_target(transform_label: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The transform's standardisation of a continuous label (`label.target`: column, mean,
    std), or None for classes: the trainer regresses `(target - mean) / std`."""
    return transform_label.get("target") if transform_label.get("type") == CONTINUOUS else None


def label_classes(label: Mapping[str, Any]) -> list[Any]:
    """The classes the spec's `label` section gives: declared, or a continuous label's bins."""
    return list(range(bins(label))) if is_continuous(label) else list(label["classes"])
