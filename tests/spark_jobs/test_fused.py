"""Fused stages (`lakeprep_jobs.fused`): one session, the separate stages' outputs exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakeprep_airflow import spec as spec_mod
from lakeprep_jobs import fused, lake_io, stage_entry

REPO = Path(__file__).resolve().parents[2]
PENGUINS = REPO / "tests" / "data" / "pipelines" / "penguins.yaml"
DAY = "2007-11-16"  # 16 penguins, one unmeasured adult quarantined


def land(tmp_path: Path, name: str) -> Path:
    from tests.data import penguins

    root = tmp_path / name
    penguins.land(f"file://{root}", [DAY])
    return root


def daily_plan(root: Path, errors: Path | None = None, **params: dict) -> list[dict]:
    """The daily stages' plan entries, each stage's argv as the operator builds it."""
    spec = spec_mod.load_spec(PENGUINS)
    lake = f"file://{root}"
    plan = []
    for stage in spec_mod.DAILY_STAGES:
        inputs, output = spec_mod.stage_io(spec, stage, lake_root=lake, ds=DAY)
        p = spec_mod.stage_params(spec, stage, lake_root=lake, ds=DAY, run_id="t")
        argv = [a for uri in inputs for a in ("--input", uri)]
        argv += ["--output", output, "--params", json.dumps({**p, **params.get(stage, {})})]
        if errors:
            argv += ["--error-file", str(errors / f"{stage}.error")]
        plan.append({"stage": stage, "argv": argv})
    return plan


def partition(root: Path, stage: str) -> Path:
    return root / stage / "penguins" / f"dt={DAY}"


def snapshot(spark, part: Path) -> dict[str, object]:
    """Every file of a partition: Parquet folders as their schema and rows, the rest as text."""
    files = sorted(p.relative_to(part) for p in part.rglob("*") if p.is_file())
    out: dict[str, object] = {}
    for folder in sorted({f.parent for f in files if f.name.startswith("part-")}):
        df = spark.read.parquet(str(part / folder))
        rows = sorted(json.dumps(r.asDict(recursive=True), sort_keys=True, default=str) for r in df.collect())
        out[str(folder / "part-*")] = (df.schema.simpleString(), rows)
    for f in files:
        # Part files (and Hadoop's .crc of them) carry a random job id in their names.
        if not f.name.lstrip(".").startswith("part-") and not f.name.endswith(".crc"):
            out[str(f)] = (part / f).read_text()
    return out


def test_every_stage_module_declares_its_stage():
    for stage in spec_mod.STAGES:
        assert fused.load_stage(stage).name == stage
    for bad in ("stage_entry", "fused", "nope", "../validate", "lakeprep_jobs.validate"):
        with pytest.raises(ValueError, match=f"plan names stage {bad!r}"):
            fused.load_stage(bad)


def test_fused_daily_stages_write_exactly_what_the_separate_stages_write(spark, tmp_path):
    import shutil

    root = land(tmp_path, "lake")
    separate, written = {}, {}
    for entry in daily_plan(root):
        call = stage_entry.prepare(fused.load_stage(entry["stage"]), entry["argv"])
        separate[entry["stage"]] = stage_entry.run_stage(spark, call)
    for stage in spec_mod.DAILY_STAGES:
        written[stage] = snapshot(spark, partition(root, stage))
        shutil.rmtree(root / stage)

    reports = fused.run_plan(spark, fused.parse_plan(json.dumps(daily_plan(root))))

    assert reports == separate
    assert list(reports) == list(spec_mod.DAILY_STAGES)
    assert reports["validate"]["rows_in"] == 16 and reports["validate"]["rows_quarantined"] == 1
    for stage in spec_mod.DAILY_STAGES:
        assert snapshot(spark, partition(root, stage)) == written[stage], stage
    # What the comparison covered: rows, the quarantine, the reports, validate's profile.
    assert {
        "part-*",
        f"{lake_io.QUARANTINE_DIR}/part-*",
        lake_io.REPORT_NAME,
        "_stats.json",
        "_SUCCESS",
    } <= set(written["validate"])
    assert lake_io.REPORT_NAME in written["preprocess"]  # no reference features: no profile
    assert len(written["sample"]["part-*"][1]) == reports["sample"]["rows_out"] > 0


def test_a_failing_stage_stops_the_plan_naming_itself_and_keeps_the_earlier_commits(spark, tmp_path):
    root = land(tmp_path, "lake")
    errors = tmp_path / "errors"
    errors.mkdir()
    # Valid params that fail at run time: preprocess keys rows on a column that does not exist.
    plan = daily_plan(root, errors, preprocess={"id_column": "no_such_column"})
    calls = fused.parse_plan(json.dumps(plan))

    with pytest.raises(Exception, match="no_such_column") as err:
        fused.run_plan(spark, calls)

    assert "stage preprocess" in " ".join(getattr(err.value, "__notes__", []))
    assert not (errors / "validate.error").exists() or not (errors / "validate.error").read_text()
    assert "no_such_column" in (errors / "preprocess.error").read_text()
    assert not (errors / "sample.error").exists() or not (errors / "sample.error").read_text()
    assert (partition(root, "validate") / "_SUCCESS").is_file()
    assert not partition(root, "preprocess").exists()  # its staging folder was removed, not committed
    assert not partition(root, "sample").exists()


def test_a_bad_param_of_a_later_stage_fails_before_any_stage_runs(tmp_path):
    root = land(tmp_path, "lake")
    errors = tmp_path / "errors"
    errors.mkdir()
    plan = daily_plan(root, errors, sample={"fractoin": 0.5})

    with pytest.raises(ValueError, match=r"bad --params for SampleParams: .*fractoin"):
        fused.parse_plan(json.dumps(plan))  # no session: nothing has touched Spark yet

    assert "fractoin" in (errors / "sample.error").read_text()
    assert not (root / "validate").exists()


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("{", "--plan is not valid JSON"),
        ("[]", "--plan must be a non-empty JSON list"),
        ('[{"stage": "validate"}]', "--plan entry 0 must be"),
        ('[{"stage": "train", "argv": []}]', "plan names stage 'train'"),
    ],
)
def test_a_malformed_plan_is_refused_naming_what_is_wrong(plan, message):
    with pytest.raises(ValueError, match=message):
        fused.parse_plan(plan)
