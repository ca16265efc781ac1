from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from lakeprep_airflow import spec as spec_mod
from lakeprep_airflow.spec import SpecError, expressions, load_spec

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "pipelines" / "flights.yaml"


def write_spec(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(FLIGHTS.read_text())
    mutate(data)
    path = tmp_path / "flights.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_flights_spec_is_valid_and_defaults_are_filled():
    spec = load_spec(FLIGHTS)
    assert spec.dag_id == "lakeprep_flights"
    assert spec.columns_with_role("id") == ["flight_id"]
    assert spec.columns_with_role("label") == ["delayed"]
    assert "plane_model" in spec.columns_with_role("text")
    assert spec.data["window"]["days"] == 30
    assert spec.stages["check_drift"]["action"] == "warn"
    assert spec.stages["fit_transform"]["clip_quantiles"] is None  # a default from the knobs


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["stages"]["sample"].update(fraction=1.5),
            r"stages\.sample\.fraction: 1\.5 is greater than the maximum of 1",
        ),
        (lambda d: d["source"].update(format="xls"), r"source\.format: 'xls' is not one of"),
        (lambda d: d.update(colour="blue"), r"<top level>: Additional properties are not allowed \('colour'"),
        (lambda d: d["source"].update(uri="{lake}/raw/flights"), r"source\.uri: .* does not match"),
        (
            lambda d: d["columns"].append({"name": "carrier", "type": "string", "role": "numeric"}),
            "column 'carrier' is declared twice",
        ),
        (lambda d: d["derived"].pop(1), r"exactly one column must have role 'label'"),
        (lambda d: d["columns"][0].pop("type"), r"columns\.0 \(year\): raw columns need a 'type'"),
        (
            lambda d: d["references"][0].update(join_keys=["airport"]),
            r"references\.weather\.join_keys names \['airport'\]",
        ),
        (
            lambda d: d["stages"]["sample"].update(splits={"train": 0.5, "validation": 0.1, "test": 0.1}),
            "must sum to 1",
        ),
        (lambda d: d["stages"]["sample"].update(class_fractions={"2": 0.5}), r"names classes \['2'\]"),
        (
            lambda d: d["spark"]["conf"].update({"spark.driver.memory; rm -rf /": "1g"}),
            r"spark\.conf: .* does not match",
        ),
        (
            lambda d: d["training"].update(world_size=0),
            r"training\.world_size: 0 is less than the minimum of 1",
        ),
    ],
)
def test_broken_specs_name_the_file_and_field(tmp_path, mutate, message):
    path = write_spec(tmp_path, mutate)
    with pytest.raises(SpecError, match=message) as err:
        load_spec(path)
    assert str(path) in str(err.value)


def test_file_name_must_match_dataset_name(tmp_path):
    path = tmp_path / "other.yaml"
    shutil.copy(FLIGHTS, path)
    with pytest.raises(SpecError, match="file name must match name 'flights'"):
        load_spec(path)


def test_invalid_yaml_is_reported(tmp_path):
    path = tmp_path / "flights.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(path)


def test_overrides_are_validated_like_the_file():
    spec = load_spec(FLIGHTS)
    assert spec.with_overrides({"stages.sample.seed": 3}).stages["sample"]["seed"] == 3
    with pytest.raises(
        SpecError, match=r"stages\.sample\.fraction: 0 is less than or equal to the minimum of 0"
    ):
        spec.with_overrides({"stages.sample.fraction": 0})
    with pytest.raises(SpecError, match="does not name a spec field"):
        spec.with_overrides({"stages.sample.sed": 3})
    with pytest.raises(SpecError, match=r"stages\.sample\.seed: 'x' is not of type 'integer'"):
        spec.with_overrides({"stages.sample.seed": "x"})


def test_stage_io_follows_the_lake_layout():
    spec = load_spec(FLIGHTS)
    lake = "hdfs://nn:8020/lake"
    assert spec_mod.stage_io(spec, "validate", lake_root=lake, ds="2013-01-02") == (
        ["hdfs://nn:8020/lake/raw/flights/dt=2013-01-02"],
        "hdfs://nn:8020/lake/validate/flights/dt=2013-01-02",
    )
    assert spec_mod.stage_io(spec, "sample", lake_root=lake, ds="2013-01-02") == (
        ["hdfs://nn:8020/lake/preprocess/flights/dt=2013-01-02"],
        "hdfs://nn:8020/lake/sample/flights/dt=2013-01-02",
    )
    assert spec_mod.run_window(spec, "2013-01-02")[0] == "2012-12-04"
    for stage in spec_mod.WINDOW_STAGES:
        inputs, output = spec_mod.stage_io(
            spec, stage, lake_root=lake, ds="2013-01-02", window_days=["2012-12-30", "2013-01-02"]
        )
        assert inputs == [
            "hdfs://nn:8020/lake/sample/flights/dt=2012-12-30",
            "hdfs://nn:8020/lake/sample/flights/dt=2013-01-02",
        ]
        assert output == f"hdfs://nn:8020/lake/{stage}/flights/dt=2013-01-02"
    with pytest.raises(SpecError, match="must end with the run's own date 2013-01-02"):
        spec_mod.stage_io(spec, "export_shards", lake_root=lake, ds="2013-01-02", window_days=["2013-01-01"])


def test_column_transform_overrides_resolve_over_the_stage_knobs(tmp_path):
    spec = load_spec(FLIGHTS)
    by_name = {c["name"]: c for cols in spec_mod.column_transforms(spec).values() for c in cols}
    assert by_name["dest"]["encoding"] == "hash" and by_name["dest"]["buckets"] == 256
    assert by_name["carrier"]["encoding"] == "vocab" and by_name["carrier"]["min_frequency"] == 2
    assert by_name["distance"] == {
        "name": "distance",
        "scaling": "standard",
        "impute": "mean",
        "clip_quantiles": None,
    }
    assert by_name["plane_model"]["max_tokens"] == 8

    def numeric_vocab(d):
        d["columns"][15]["transform"] = {"max_vocab": 3}  # distance is numeric

    with pytest.raises(SpecError, match=r"column 'distance' \(numeric\): transform.max_vocab applies to"):
        spec_mod.column_transforms(load_spec(write_spec(tmp_path, numeric_vocab)))


def _plane_model(data: dict) -> dict:
    return next(c for c in data["references"][1]["columns"] if c["name"] == "plane_model")


def test_a_text_column_encoded_by_a_tokenizer_file_names_it_and_keeps_its_text(tmp_path):
    def tokenized(d):
        _plane_model(d)["transform"] = {"encoding": "tokenizer", "tokenizer": "{lake}/tokenizers/t.json"}

    spec = load_spec(write_spec(tmp_path, tokenized))
    (text,) = spec_mod.column_transforms(spec, "hdfs://nn:8020/lake")["text"]
    assert (text["encoding"], text["tokenizer"]) == ("tokenizer", "hdfs://nn:8020/lake/tokenizers/t.json")
    params = spec_mod.stage_params(spec, "preprocess", lake_root="file:///lake", ds="2013-01-01", run_id="r")
    assert params["subword_text"] == ["plane_model"]
    # The sample stage counts the day's truncation with the same file and length.
    sample = spec_mod.stage_params(spec, "sample", lake_root="file:///lake", ds="2013-01-01", run_id="r")
    assert sample["subword_texts"] == [
        {
            "name": "plane_model",
            "tokenizer": "file:///lake/tokenizers/t.json",
            "max_tokens": text["max_tokens"],
        }
    ]
    # Specs without the encoding get no new key: their params and config hash are unchanged.
    assert "subword_text" not in spec_mod.stage_params(
        load_spec(FLIGHTS), "preprocess", lake_root="file:///l", ds="2013-01-01", run_id="r"
    )
    assert "subword_texts" not in spec_mod.stage_params(
        load_spec(FLIGHTS), "sample", lake_root="file:///l", ds="2013-01-01", run_id="r"
    )


def test_a_tokenizer_trained_on_the_window_needs_no_file_and_no_day_count(tmp_path):
    def trained(d):
        _plane_model(d)["transform"] = {"encoding": "tokenizer", "tokenizer_model": "bpe", "vocab_size": 800}

    spec = load_spec(write_spec(tmp_path, trained))
    (text,) = spec_mod.column_transforms(spec, "file:///lake")["text"]
    assert (text["tokenizer_model"], text["vocab_size"]) == ("bpe", 800) and "tokenizer" not in text
    sample = spec_mod.stage_params(spec, "sample", lake_root="file:///lake", ds="2013-01-01", run_id="r")
    assert "subword_texts" not in sample  # no file yet when the day is sampled
    (profiled,) = sample["fit_profile"]["text"]
    assert profiled == {"name": "plane_model", "encoding": "tokenizer", "tokenizer_model": "bpe"}
    preprocess = spec_mod.stage_params(
        spec, "preprocess", lake_root="file:///lake", ds="2013-01-01", run_id="r"
    )
    assert preprocess["subword_text"] == ["plane_model"]


@pytest.mark.parametrize(
    ("transform", "message"),
    [
        ({"encoding": "tokenizer"}, r"'plane_model': encoding 'tokenizer' needs transform.tokenizer"),
        (
            {"encoding": "tokenizer", "tokenizer": "{lake}/t.json", "tokenizer_model": "bpe"},
            r"give transform.tokenizer \(a tokenizer file\) or transform.tokenizer_model",
        ),
        ({"tokenizer_model": "wordpiece"}, r"transform.tokenizer_model is used by encoding 'tokenizer' only"),
        ({"tokenizer": "{lake}/t.json"}, r"transform.tokenizer is used by encoding 'tokenizer' only"),
    ],
)
def test_a_tokenizer_encoding_and_its_file_go_together(tmp_path, transform, message):
    def mutate(d):
        _plane_model(d)["transform"] = transform

    with pytest.raises(SpecError, match=message):
        spec_mod.column_transforms(load_spec(write_spec(tmp_path, mutate)))


def test_reserved_column_names_are_refused(tmp_path):
    def clash(d):
        d["columns"][9]["name"] = "split"

    with pytest.raises(SpecError, match=r"column name\(s\) \['split'\] are reserved"):
        load_spec(write_spec(tmp_path, clash))


@pytest.mark.parametrize("stage", spec_mod.STAGES)
def test_stage_params_are_accepted_by_the_spark_job(stage):
    """The cross-runtime contract: what the operator sends is what the job's dataclass takes."""

    from lakeprep_contracts import knobs
    from lakeprep_jobs import stage_args

    spec = load_spec(FLIGHTS)
    params = spec_mod.stage_params(spec, stage, lake_root="file:///lake", ds="2013-01-02", run_id="r1")
    # Every declared knob of the stage reaches the job.
    assert {k.name for k in knobs.KNOBS[stage]} <= set(params)
    cls = params_class(stage)
    built = stage_args.params_from(cls, params)
    assert dataclasses.asdict(built).items() >= params.items()


def test_preprocess_gets_the_partition_day_that_chooses_reference_snapshots():
    spec = load_spec(FLIGHTS)
    params = spec_mod.stage_params(spec, "preprocess", lake_root="file:///lake", ds="2013-01-02", run_id="r1")
    assert params["day"] == "2013-01-02"
    assert [r["uri"] for r in params["references"]] == [
        "file:///lake/reference/weather",
        "file:///lake/reference/planes",
    ]


def params_class(stage: str) -> type:
    """The params dataclass a stage's job parses (`STAGE.params_cls`; balance's own)."""
    import importlib

    module = importlib.import_module(f"lakeprep_jobs.{stage}")
    if hasattr(module, "STAGE"):
        return module.STAGE.params_cls
    (cls,) = [
        obj
        for obj in vars(module).values()
        if dataclasses.is_dataclass(obj)
        and obj.__module__ == module.__name__
        and obj.__name__.endswith("Params")
    ]
    return cls


@pytest.mark.parametrize("stage", [*spec_mod.STAGES, "balance"])
def test_params_dataclass_defaults_are_the_knob_defaults(stage):
    """A dataclass default that copies a knob's default must stay equal to it (one fact)."""

    from lakeprep_contracts import knobs

    cls = params_class(stage)
    declared = knobs.defaults(stage)
    for field in dataclasses.fields(cls):
        if field.name not in declared:
            continue
        if field.default is not dataclasses.MISSING:
            assert field.default == declared[field.name], (stage, field.name)
        elif field.default_factory is not dataclasses.MISSING:
            assert field.default_factory() == declared[field.name], (stage, field.name)


def test_config_hash_changes_with_the_data_shaping_fields():
    spec = load_spec(FLIGHTS)
    assert spec_mod.config_hash(spec) == spec_mod.config_hash(load_spec(FLIGHTS))
    assert spec_mod.config_hash(spec) != spec_mod.config_hash(spec.with_overrides({"stages.sample.seed": 99}))
    # How much Spark logs is not one of them.
    assert spec.data["spark"]["log_level"] == "WARN"
    loud = spec.with_overrides({"spark.log_level": "INFO"})
    assert spec_mod.config_hash(spec) == spec_mod.config_hash(loud)
    # Nor whether the stages share a submission (docs/PIPELINE.md#fused-stages).
    assert spec.data["spark"]["fuse_stages"] is False
    fused = spec.with_overrides({"spark.fuse_stages": True})
    assert spec_mod.config_hash(spec) == spec_mod.config_hash(fused)
    # Nor how often and how soon a failed task is retried; those reach every task.
    assert spec.data["tasks"] == {"retries": 2, "retry_delay_seconds": 120}
    patient = spec.with_overrides({"tasks.retries": 5, "tasks.retry_delay_seconds": 7})
    assert spec_mod.config_hash(spec) == spec_mod.config_hash(patient)
    from lakeprep_airflow.dag_factory import build_dags

    for dag in build_dags(patient):
        assert {(t.retries, t.retry_delay.total_seconds()) for t in dag.tasks} == {(5, 7.0)}, dag.dag_id


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({"strata": ["nope"]}, r"stages\.sample\.strata names \['nope'\]"),
        ({"strata": ["plane_model"]}, r"stages\.sample\.strata names \['plane_model'\]"),
        ({"strata": ["label", "delayed"]}, "names the label twice"),
        (
            {"strata": ["origin"], "class_fractions": {"0": 0.5}},
            r"leave out the label \('delayed'\)",
        ),
        ({"class_counts": {"5": 10}}, r"class_counts names classes \['5'\]"),
        (
            {"class_counts": {"0": 10}, "class_fractions": {"0": 0.5}},
            r"classes \['0'\] are in both class_fractions and class_counts",
        ),
    ],
)
def test_sample_strata_and_counts_are_checked(tmp_path, sample, message):
    def mutate(d):
        d["stages"]["sample"].update(sample)

    with pytest.raises(SpecError, match=message):
        load_spec(write_spec(tmp_path, mutate))


def test_sample_strata_of_label_and_a_feature_are_accepted(tmp_path):
    def mutate(d):
        d["stages"]["sample"].update(strata=["delayed", "origin"])

    spec = load_spec(write_spec(tmp_path, mutate))
    params = spec_mod.stage_params(spec, "sample", lake_root="file:///l", ds="2013-01-02", run_id="r")
    assert params["strata"] == ["label", "origin"]


@pytest.mark.parametrize(
    ("fit", "message"),
    [
        ({"pca_components": 2, "pca_variance": 0.9}, "pca_components 2 and pca_variance 0.9 are exclusive"),
        (
            {"selector_mode": "numTopFeatures", "selector_threshold": 2.5},
            r"selector_threshold 2\.5 must be a whole number >= 1 for numTopFeatures",
        ),
        (
            {"selector_mode": "fpr", "selector_threshold": 5},
            r"selector_threshold 5 must be in \[0, 1\] for fpr",
        ),
    ],
)
def test_selection_and_pca_settings_are_checked(tmp_path, fit, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write_spec(tmp_path, lambda d: d["stages"]["fit_transform"].update(fit)))


@pytest.fixture
def counted_expression_checks(monkeypatch) -> list[Path]:
    """The specs `_check_expressions` ran for, in order (it still runs)."""
    ran: list[Path] = []
    check = expressions._check_expressions

    def counting(where, inputs):
        ran.append(where)
        check(where, inputs)

    monkeypatch.setattr(expressions, "_check_expressions", counting)
    return ran


def test_a_checks_cache_skips_expression_checks_that_passed_before(tmp_path, counted_expression_checks):
    cache = tmp_path / "cache"
    first = load_spec(FLIGHTS, checks_cache=cache)
    assert counted_expression_checks == [FLIGHTS]
    assert [p.parent.name for p in cache.rglob("*") if p.is_file()] == ["spec-expressions"]
    again = load_spec(FLIGHTS, checks_cache=cache)
    assert counted_expression_checks == [FLIGHTS]  # recorded: not rerun
    assert again.data == first.data
    # Without a cache (tasks, spec_check) and for the overrides of a run, every check runs.
    load_spec(FLIGHTS)
    first.with_overrides({"stages.sample.seed": 3})
    assert counted_expression_checks == [FLIGHTS] * 3


def test_a_changed_expression_or_code_is_checked_again(tmp_path, monkeypatch, counted_expression_checks):
    cache = tmp_path / "cache"
    load_spec(FLIGHTS, checks_cache=cache)

    def other_delay(d):
        next(c for c in d["derived"] if c["name"] == "delayed")["expr"] = "CAST(arr_delay > 30 AS INT)"

    changed = write_spec(tmp_path, other_delay)
    load_spec(changed, checks_cache=cache)
    assert counted_expression_checks == [FLIGHTS, changed]
    # The same expressions under other code (the check's module, another sqlglot) are checked again.
    monkeypatch.setattr(expressions, "_checks_code_version", lambda: "another sqlglot")
    load_spec(FLIGHTS, checks_cache=cache)
    assert counted_expression_checks == [FLIGHTS, changed, FLIGHTS]


def test_a_broken_expression_fails_every_load_with_a_checks_cache(tmp_path, counted_expression_checks):
    cache = tmp_path / "cache"

    def unknown_column(d):
        next(c for c in d["derived"] if c["name"] == "delayed")["expr"] = "CAST(arrival_delay > 15 AS INT)"

    path = write_spec(tmp_path, unknown_column)
    for _ in range(2):
        with pytest.raises(SpecError, match=r"derived\.delayed: .* refers to \['arrival_delay'\]") as err:
            load_spec(path, checks_cache=cache)
        assert str(path) in str(err.value)
    assert counted_expression_checks == [path, path]
    assert not any(p.is_file() for p in cache.rglob("*"))  # nothing recorded for a failure


def test_an_unusable_checks_cache_only_costs_the_check(tmp_path, counted_expression_checks):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    for _ in range(2):
        assert load_spec(FLIGHTS, checks_cache=not_a_folder).name == "flights"
    assert counted_expression_checks == [FLIGHTS, FLIGHTS]
