"""Named and integer classes (`lakeprep_contracts.labels`) and the spec's checks of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lakeprep_airflow.spec import STAGES, SpecError, load_spec, stage_params
from lakeprep_contracts import labels

REPO = Path(__file__).resolve().parents[2]
IRIS = REPO / "tests" / "data" / "pipelines" / "iris.yaml"
FLIGHTS = REPO / "pipelines" / "flights.yaml"


def test_named_classes_get_ids_in_the_declared_order_and_integer_classes_stay():
    assert labels.stored_classes([1, 5, 9]) == [1, 5, 9] and labels.names([1, 5, 9]) is None
    assert labels.stored_classes(["b", "a"]) == [0, 1] and labels.names(["b", "a"]) == ["b", "a"]
    # Text as Spark casts the label: a boolean is `true`, and a boolean is a name, not 1.
    assert labels.ids_by_text([True, False, 2.5]) == {"true": 0, "false": 1, "2.5": 2}
    assert not labels.is_integer([True, False])
    assert labels.problems([1, "1", "a"]) == ["classes 1 and '1' are both '1' as the label's text"]


def test_per_class_knobs_are_keyed_by_the_stored_label():
    classes = ["setosa", "versicolor", "virginica"]
    assert labels.stored_keys(classes, {"virginica": 0.5}, "k") == {"2": 0.5}
    assert labels.stored_keys([0, 1], {"1": 0.5}, "k") == {"1": 0.5}
    with pytest.raises(ValueError, match=r"k names classes \['Setosa'\] not in label.classes"):
        labels.stored_keys(classes, {"Setosa": 3}, "k")


def test_each_stage_gets_the_classes_it_compares_with():
    spec = load_spec(IRIS)
    params = {s: stage_params(spec, s, lake_root="file:///l", ds="2024-01-03", run_id="r") for s in STAGES}
    names = ["setosa", "versicolor", "virginica"]
    assert params["validate"]["label_classes"] == names  # compares the label's text
    assert params["preprocess"]["label_classes"] == names  # writes the ids
    assert params["sample"]["label_classes"] == [0, 1, 2]
    assert params["sample"]["class_counts"] == {"0": 10}
    assert params["fit_transform"]["label_names"] == names
    assert params["export_shards"]["label_classes"] == [0, 1, 2]
    # Integer classes: preprocess casts as before, no names travel.
    flights = load_spec(FLIGHTS)
    assert "label_classes" not in stage_params(
        flights, "preprocess", lake_root="file:///l", ds="2013-01-01", run_id="r"
    )
    assert "label_names" not in stage_params(
        flights, "fit_transform", lake_root="file:///l", ds="2013-01-01", run_id="r"
    )


@pytest.mark.parametrize(
    ("label", "sample", "message"),
    [
        ({"classes": [1, "1"]}, {}, r"label\.classes: classes 1 and '1' are both '1'"),
        (
            {},
            {"class_counts": {"Setosa": 3}},
            r"class_counts names classes \['Setosa'\] not in label\.classes",
        ),
        (
            {},
            {"class_fractions": {"iris": 0.5}},
            r"class_fractions names classes \['iris'\] not in label\.classes",
        ),
    ],
)
def test_bad_named_classes_are_refused_naming_the_field(tmp_path, label, sample, message):
    data = yaml.safe_load(IRIS.read_text())
    data["label"].update(label)
    data["stages"]["sample"] = {"seed": 7, **sample}
    path = tmp_path / "iris.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=message):
        load_spec(path)
