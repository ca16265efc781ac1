"""A continuous label (`label.type: continuous`): what each stage gets and what the spec refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lakeprep_airflow.spec import DAILY_STAGES, WINDOW_STAGES, SpecError, load_spec, stage_params
from lakeprep_contracts import labels
from lakeprep_contracts.window_fit import FitParams
from lakeprep_jobs import stage_args
from lakeprep_jobs.export_shards import ExportParams
from lakeprep_jobs.preprocess import PreprocessParams
from lakeprep_jobs.validate import ValidateParams

REPO = Path(__file__).resolve().parents[2]
DIABETES = REPO / "tests" / "data" / "pipelines" / "diabetes.yaml"


def write(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(DIABETES.read_text())
    mutate(data)
    path = tmp_path / "diabetes.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_each_stage_gets_the_label_as_a_number_or_its_bins():
    spec = load_spec(DIABETES)
    params = {
        s: stage_params(spec, s, lake_root="file:///l", ds="2024-01-03", run_id="r") for s in DAILY_STAGES
    }
    assert params["validate"]["label_type"] == "continuous" and "label_classes" not in params["validate"]
    # Validate profiles the label's values as a numeric, for check_drift.
    assert params["validate"]["stats_kinds"]["progression"] == "numeric"
    assert params["preprocess"]["label_bins"] == 4 and "label_classes" not in params["preprocess"]
    # Sampling counts the bins as classes.
    assert params["sample"]["label_classes"] == [0, 1, 2, 3]
    # The jobs take them (an unknown key would be a TypeError).
    stage_args.params_from(ValidateParams, params["validate"])
    stage_args.params_from(PreprocessParams, params["preprocess"])


def test_the_window_stages_fit_the_target_and_export_the_bins_as_strata():
    spec = load_spec(DIABETES)
    params = {
        s: stage_params(spec, s, lake_root="file:///l", ds="2024-01-03", run_id="r") for s in WINDOW_STAGES
    }
    fit = stage_args.params_from(FitParams, params["fit_transform"])
    assert fit.label_type == "continuous" and fit.label_classes == [0, 1, 2, 3] and fit.label_names is None
    # The contract serving replays reads the label as a number (validate's params).
    assert params["fit_transform"]["contract"]["validate"]["label_type"] == "continuous"
    export = stage_args.params_from(ExportParams, params["export_shards"])
    assert export.label_classes == [0, 1, 2, 3] and export.balance.strategy == "none"


def test_bins_default_to_quartiles():
    assert labels.label_classes({"column": "y", "type": "continuous"}) == [0, 1, 2, 3]
    assert labels.label_classes({"column": "y", "type": "continuous", "bins": 10}) == list(range(10))
    assert labels.label_classes({"column": "y", "classes": ["a", "b"]}) == ["a", "b"]


def _set(path: str, value):
    def mutate(data):
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_set("label.classes", [0, 1]), r"label\.classes \[0, 1\] is for a label of classes; a 'continuous'"),
        (_set("label.bins", 1), r"label.bins"),
        (_set("stages.sample.class_counts", {"0": 3}), r"stages\.sample\.class_counts \{'0': 3\} is refused"),
        (_set("stages.sample.class_fractions", {"1": 0.5}), r"stages\.sample\.class_fractions .* is refused"),
        (
            _set("stages.balance.strategy", "undersample"),
            r"stages\.balance\.strategy 'undersample' is refused",
        ),
        (_set("stages.balance.augment", "smote"), r"stages\.balance\.augment 'smote' is refused"),
        (
            _set("stages.export_shards.shards", "encoded"),
            r"stages\.export_shards\.shards 'encoded' is refused",
        ),
        (
            lambda d: d["columns"][1].update(name="target"),
            r"column 'target' is the prepared rows' value of a 'continuous' label; rename it",
        ),
        (
            lambda d: d["columns"][-1].update(type="boolean"),
            r"columns\.11 \(progression\)\.type: the label column is typed 'boolean' but label\.type",
        ),
        (lambda d: d["label"].pop("type"), r"'classes' is a required property"),
    ],
)
def test_what_needs_classes_is_refused_for_a_continuous_label_naming_the_knob(tmp_path, mutate, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, mutate))


def test_bins_are_refused_for_a_label_of_classes(tmp_path):
    path = REPO / "tests" / "data" / "pipelines" / "iris.yaml"
    data = yaml.safe_load(path.read_text())
    data["label"]["bins"] = 3
    (tmp_path / "iris.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"label\.bins applies to label\.type 'continuous' only"):
        load_spec(tmp_path / "iris.yaml")


def test_univariate_selection_of_a_continuous_label_is_f_regression_against_its_value(tmp_path):
    spec = load_spec(write(tmp_path, _set("stages.fit_transform.selector_mode", "numTopFeatures")))
    fit = stage_params(spec, "fit_transform", lake_root="file:///l", ds="2024-01-03", run_id="r")
    assert (fit["selector_mode"], fit["selector_label_type"]) == ("numTopFeatures", "continuous")
    assert stage_args.params_from(FitParams, fit).selector_label_type == "continuous"
    # Each day records the numerics' products with the target; without selection it does not.
    sample = stage_params(spec, "sample", lake_root="file:///l", ds="2024-01-03", run_id="r")
    assert sample["fit_profile"]["target_products"] is True and sample["fit_profile"]["target"] is True
    plain = stage_params(load_spec(DIABETES), "sample", lake_root="file:///l", ds="2024-01-03", run_id="r")
    assert "target_products" not in plain["fit_profile"]


def test_a_label_of_classes_is_not_profiled_for_drift():
    iris = load_spec(REPO / "tests" / "data" / "pipelines" / "iris.yaml")
    kinds = stage_params(iris, "validate", lake_root="file:///l", ds="2024-01-03", run_id="r")["stats_kinds"]
    assert "species" not in kinds
