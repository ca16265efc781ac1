"""The spec checks that run before any job: raw names, null tokens, text sources, the time
zone and every expression (sqlglot), and the `spec_check` command that runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakeprep_airflow import spec_check
from lakeprep_airflow.spec import SpecError, load_spec, stage_params

REPO = Path(__file__).resolve().parents[2]
FLIGHTS = REPO / "pipelines" / "flights.yaml"
PENGUINS = REPO / "tests" / "data" / "pipelines" / "penguins.yaml"


def write_spec(tmp_path: Path, mutate, source: Path = FLIGHTS) -> Path:
    data = yaml.safe_load(source.read_text())
    mutate(data)
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data))
    return path


def derived(data: dict, name: str) -> dict:
    return next(c for c in data["derived"] if c["name"] == name)


def as_text_source(data: dict) -> None:
    data["source"].update(format="text", text_column="body", options={})
    data["columns"] = [{"name": "body", "type": "string", "role": "text"}]
    data["derived"] = [
        {"name": "doc_id", "role": "id", "expr": "sha2(concat_ws('|', _source_file, body), 256)"},
        {"name": "delayed", "role": "label", "expr": "CAST(length(body) > 40 AS INT)"},
    ]
    data.pop("references")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: derived(d, "delayed").update(expr="CAST(arr_delay > AS INT)"),
            r"derived\.delayed: 'CAST\(arr_delay > AS INT\)' does not parse as Spark SQL",
        ),
        (
            lambda d: derived(d, "delayed").update(expr="CAST(arrival_delay > 15 AS INT)"),
            r"derived\.delayed: .* refers to \['arrival_delay'\], which are neither raw contract columns",
        ),
        (
            # A derived column may only use the ones before it.
            lambda d: derived(d, "flight_id").update(expr="concat_ws('-', carrier, day_of_week)"),
            r"derived\.flight_id: .* refers to \['day_of_week'\]",
        ),
        (
            lambda d: derived(d, "day_of_week").update(expr="avg(hour)"),
            r"derived\.day_of_week: 'avg\(hour\)' holds an aggregate",
        ),
        (
            lambda d: derived(d, "day_of_week").update(expr="hour - lag(hour) OVER (ORDER BY hour)"),
            r"derived\.day_of_week: .* holds a window",
        ),
        (
            lambda d: derived(d, "day_of_week").update(expr="dayofweek(time_hour); DROP TABLE x"),
            r"derived\.day_of_week: .* must be one expression, found 2",
        ),
        (
            lambda d: derived(d, "day_of_week").update(expr="dayofwek(time_hour)"),
            r"derived\.day_of_week: .* calls \['dayofwek'\], not Spark SQL functions sqlglot knows",
        ),
        (
            lambda d: d["references"][1]["columns"][2].update(expr="concat_ws(' ', manufacturer,"),
            r"references\.planes\.columns\.plane_model: .* does not parse as Spark SQL",
        ),
        (
            lambda d: d["columns"][0].update(raw_name=" Year"),
            r"columns\.0 \(year\)\.raw_name: ' Year' has surrounding whitespace",
        ),
        (
            lambda d: d["columns"][1].update(raw_name="year"),
            r"columns\.1 \(month\): reads the file's column 'year', already read by 'year'",
        ),
        (
            lambda d: derived(d, "delayed").update(raw_name="Delayed"),
            r"derived\.1 \(delayed\)\.raw_name: applies to raw columns only",
        ),
        (
            lambda d: d["columns"][0].update(null_tokens="NA"),
            r"columns\.0\.null_tokens: 'NA' is not of type 'array'",
        ),
        (lambda d: d["columns"][0].update(name="Year"), r"columns\.0\.name: 'Year' does not match"),
        (
            lambda d: d["source"]["options"].update(mode="DROPMALFORMED"),
            r"source\.options\.mode: set by validate itself",
        ),
        (lambda d: d["source"].update(format="text"), r"source\.text_column: format 'text' needs the column"),
        (
            lambda d: (
                as_text_source(d),
                d["columns"].append({"name": "x", "type": "int", "role": "numeric"}),
            ),
            r"format 'text' reads one string column, so columns must be exactly",
        ),
        (
            lambda d: d["source"].update(text_per="file"),
            r"source\.text_per: only for format 'text', not 'csv'",
        ),
        (
            # validate compares the label with the integer classes: a string there fails the day.
            lambda d: (
                d["columns"][11].update(role="label"),
                derived(d, "delayed").update(role="numeric"),
                d["label"].update(column="tailnum"),
            ),
            r"columns\.11 \(tailnum\)\.type: the label column is typed 'string' but label\.classes "
            r"\[0, 1\] are integers; type it 'int' .* or derive an integer label",
        ),
        (
            lambda d: derived(d, "delayed").update(type="string"),
            r"derived\.1 \(delayed\)\.type: the label column is typed 'string'",
        ),
        (
            lambda d: d.update(time_zone="Europe/Atlantis"),
            r"time_zone: 'Europe/Atlantis' is not an IANA time zone",
        ),
        (
            lambda d: (
                d.update(time_zone="America/New_York"),
                d["spark"]["conf"].update({"spark.sql.session.timeZone": "UTC"}),
            ),
            r"spark\.conf\.spark\.sql\.session\.timeZone 'UTC' differs from time_zone 'America/New_York'",
        ),
    ],
)
def test_broken_specs_are_refused_naming_file_and_field(tmp_path, mutate, message):
    path = write_spec(tmp_path, mutate)
    with pytest.raises(SpecError, match=message) as err:
        load_spec(path)
    assert str(path) in str(err.value)


def test_a_text_source_may_derive_its_id_from_the_source_file(tmp_path):
    spec = load_spec(write_spec(tmp_path, as_text_source))
    p = stage_params(spec, "validate", lake_root="file:///lake", ds="2013-01-01", run_id="r")
    assert (p["format"], p["text_column"], p["text_per"]) == ("text", "body", "line")
    assert p["stats_kinds"] == {"body": "text"}


def test_validate_params_carry_names_null_tokens_zone_and_statistics_kinds():
    spec = load_spec(PENGUINS)
    p = stage_params(spec, "validate", lake_root="file:///lake", ds="2007-11-16", run_id="r")
    assert p["null_tokens"] == ["NA"]
    assert p["time_zone"] == "UTC"
    assert p["columns"][9] == {
        "name": "culmen_length_mm",
        "raw_name": "Culmen Length (mm)",
        "type": "double",
        "nullable": False,
    }
    assert p["stats_kinds"] == {
        "island": "categorical",
        "clutch_completion": "categorical",
        "culmen_length_mm": "numeric",
        "culmen_depth_mm": "numeric",
        "flipper_length_mm": "numeric",
        "body_mass_g": "numeric",
        "sex": "categorical",
        "delta_15n": "numeric",
        "delta_13c": "numeric",
        "comments": "text",
    }
    flights = stage_params(load_spec(FLIGHTS), "validate", lake_root="file:///l", ds="2013-01-01", run_id="r")
    assert flights["time_zone"] == "America/New_York"
    assert "raw_name" not in flights["columns"][0]


def test_spec_check_prints_what_it_checked_and_exits_zero(capsys):
    assert spec_check.main([str(FLIGHTS), str(PENGUINS)]) == 0
    out = capsys.readouterr().out
    assert f"ok   {FLIGHTS}: dataset 'flights' (DAG lakeprep_flights)" in out
    assert "culmen_length_mm <- 'Culmen Length (mm)' (double, numeric)" in out
    assert "derived (2): penguin_id (id), species_id (label) [parsed, resolved, translated to DuckDB]" in out
    assert "references (2): weather on ['origin', 'year', 'month', 'day', 'hour'] (4 column(s))" in out
    assert "stages.validate: max_quarantine_share=0.2, allow_empty=False" in out
    assert out.strip().endswith("2 of 2 spec(s) valid")


def test_spec_check_exits_non_zero_naming_file_and_field(tmp_path, capsys):
    bad = write_spec(tmp_path, lambda d: derived(d, "delayed").update(expr="CAST(arrival_delay > 15 AS INT)"))
    assert spec_check.main([str(FLIGHTS), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL {bad}: derived.delayed:" in out
    assert out.strip().endswith("1 of 2 spec(s) valid")


def test_spec_check_warns_about_raw_names_that_differ_only_in_case(tmp_path, capsys):
    path = write_spec(tmp_path, lambda d: d["columns"][11].update(raw_name="Carrier"))
    assert spec_check.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        f"warn {path}: columns.9 (carrier) reads 'carrier'; columns.11 (tailnum) reads 'Carrier': "
        "these differ only in case, and validate refuses a file holding both"
    ) in out
    assert out.strip().endswith("1 of 1 spec(s) valid")
    spec_check.main([str(FLIGHTS)])
    assert "\nwarn " not in capsys.readouterr().out


def test_spec_check_without_specs_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAKEPREP_PIPELINES_DIR", str(tmp_path))
    assert spec_check.main([]) == 2
    assert "no dataset specs" in capsys.readouterr().err


def test_spec_check_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "lakeprep_airflow.spec_check", "pipelines/flights.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "1 of 1 spec(s) valid" in result.stdout
