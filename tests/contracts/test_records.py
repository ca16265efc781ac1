"""The raw record's vocabulary (`lakeprep_contracts.records`): its reasons, and no second
spelling of it anywhere in the product."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

from lakeprep_contracts import records

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("benchmarks", "contracts", "dags", "hadoop", "ops", "plugins", "spark_jobs", "training")
HOME = Path("contracts/lakeprep_contracts/records.py")
SHOWING = (records.bad_value, records.non_finite, records.label_not_in, records.label_not_finite)
REASONS = (
    records.invalid_utf8,
    records.null_in,
    records.null_id,
    records.null_label,
    *SHOWING,
)


def test_a_reason_that_shows_a_value_is_its_constant_part_then_the_value():
    """What Spark (`concat`) and Arrow (`binary_join_element_wise`) build a reason from."""
    value = 'x: "1,5"\nNaN'
    assert records.bad_value("double", "amount", "") + value == records.bad_value("double", "amount", value)
    assert records.non_finite("amount", "") + value == records.non_finite("amount", value)
    assert records.label_not_in("label", (0, 1), "") + value == records.label_not_in("label", [0, 1], value)
    assert records.label_not_finite("target", "") + value == records.label_not_finite("target", value)


def test_a_reasons_kind_is_its_text_before_the_value():
    assert records.reason_kind(records.bad_value("int", "dep_time", "12:30\n1")) == "bad int in dep_time"
    assert (
        records.reason_kind(records.label_not_in("label", ("a", "b"), "c")) == "label label not in ['a', 'b']"
    )
    assert records.reason_kind(records.null_id("id")) == "null id (id)"
    assert records.reason_kind(records.MALFORMED_RECORD) == "malformed record"


def test_csv_options_put_the_defaults_under_the_specs_options_whatever_their_case():
    assert records.csv_options({}) == {"header": "true", "multiline": "true", "escape": '"'}
    assert records.csv_options({"MULTILINE": "false", "sep": ";"}) == {
        "header": "true",
        "multiline": "false",
        "escape": '"',
        "sep": ";",
    }


# ------------------------------------------------------------------- one spelling

SEQUENCES = {
    "column types": records.TYPES,
    "column roles": records.ROLES,
    "feature roles": records.FEATURE_ROLES,
    "input formats": records.FORMATS,
    "table formats": records.TABLE_FORMATS,
    "text records per": records.TEXT_PER,
}
STRINGS = {
    "the whitespace set": records.WHITESPACE,
    "the replacement character": records.REPLACEMENT_CHARACTER,
}
MAPPINGS = {"the CSV reader defaults": records.CSV_DEFAULTS, "the Spark SQL types": records.SQL_TYPES}
_VALUE = "\x00"  # an argument of a reason function, which a placeholder of an f-string matches


def _reason_texts() -> dict[str, str]:
    """Each reason, and each showing reason's constant part, by a name for it."""
    texts = {
        "MALFORMED_RECORD": records.MALFORMED_RECORD,
        "EXACT_DUPLICATE": records.EXACT_DUPLICATE,
        "CONFLICTING_DUPLICATE": records.CONFLICTING_DUPLICATE,
    }
    for reason in REASONS:
        arity = len(inspect.signature(reason).parameters)
        texts[f"{reason.__name__}()"] = reason(*[_VALUE] * arity)
        if reason in SHOWING:
            texts[f"{reason.__name__}(..., '')"] = reason(*[_VALUE] * (arity - 1), "")
    return texts


def _product_modules() -> Iterator[tuple[Path, ast.Module]]:
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative != HOME and not any(part.startswith(".") for part in relative.parts):
                yield relative, ast.parse(path.read_text(encoding="utf-8"), str(relative))


def _strings(node: ast.AST) -> list[str] | None:
    """The elements of a tuple, list or set literal of strings, else None."""
    if not isinstance(node, ast.Tuple | ast.List | ast.Set) or len(node.elts) < 2:
        return None
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return None
    return [e.value for e in node.elts]


def _pattern(node: ast.AST) -> re.Pattern[str] | None:
    """A string literal (an f-string's placeholders matching any word) with at least four
    letters of its own, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        parts = [node.value]
    elif isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else None for v in node.values]
    else:
        return None
    if sum(c.isalpha() for p in parts if p for c in p) < 4:
        return None
    return re.compile("".join(r"\S+" if p is None else re.escape(p) for p in parts))


def _spellings(tree: ast.Module, reasons: dict[str, str]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        strings = _strings(node)
        if strings is not None:
            found |= {name for name, known in SEQUENCES.items() if set(strings) == set(known)}
        if isinstance(node, ast.Constant):
            found |= {name for name, known in STRINGS.items() if node.value == known}
        if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
            spelled = {
                str(k.value).lower(): getattr(v, "value", None)
                for k, v in zip(node.keys, node.values, strict=True)
            }
            for name, known in MAPPINGS.items():
                if spelled == {k.lower(): v for k, v in known.items()}:
                    found.add(name)
        pattern = _pattern(node)
        if pattern is not None:
            found |= {f"the reason {name}" for name, text in reasons.items() if pattern.fullmatch(text)}
    return found


def test_the_vocabulary_is_spelled_in_records_only():
    reasons = _reason_texts()
    elsewhere = {}
    for path, tree in _product_modules():
        found = _spellings(tree, reasons)
        if found:
            elsewhere[str(path)] = sorted(found)
    assert elsewhere == {}, "read these from lakeprep_contracts.records instead"


def test_the_scan_finds_each_kind_of_spelling():
    source = """
TYPES = ["date", "timestamp", "string", "int", "long", "double", "boolean"]
blank = " \\t\\n\\r\\f\\v"
defaults = {"Header": "true", "MULTILINE": "true", "escape": '"'}
reason = f"bad {kind} in {name}: "
why = f"null id ({column})"
text = "malformed record"
error = f"label column {name!r} is {kind} but label_type is continuous"
"""
    assert _spellings(ast.parse(source), _reason_texts()) == {
        "column types",
        "the whitespace set",
        "the CSV reader defaults",
        "the reason bad_value(..., '')",
        "the reason null_id()",
        "the reason MALFORMED_RECORD",
    }


def test_the_spec_schema_takes_its_enums_from_records():
    from lakeprep_airflow import spec

    column = spec.SPEC_SCHEMA["properties"]["columns"]["items"]["properties"]
    source = spec.SPEC_SCHEMA["properties"]["source"]["properties"]
    assert (column["type"]["enum"], column["role"]["enum"]) == (list(records.TYPES), list(records.ROLES))
    assert (source["format"]["enum"], source["text_per"]["enum"]) == (
        list(records.FORMATS),
        list(records.TEXT_PER),
    )
