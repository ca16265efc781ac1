from __future__ import annotations

import json

import pytest

from lakeprep_contracts import submission
from lakeprep_jobs import failure, stage_args


def test_an_encoded_argv_reaches_the_job_as_it_was():
    """JSON inside JSON, quotes, backslashes, `$`: what YARN's launch script mangles."""
    params = {"expr": "concat_ws('-', a, \"b\")", "pattern": "\\W+ $HOME (x)"}
    argv = ["--input", "hdfs://nn/raw/dt=1", "--output", "o", "--params", json.dumps(params)]
    plan = ["--plan", json.dumps([{"stage": "validate", "argv": argv}]), "--error-file", "e.error"]
    encoded = submission.encode_argv(plan)
    assert encoded[0] == "--argv-base64" and len(encoded) == 2
    assert not set(encoded[1]) - set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
    assert submission.decode_argv(encoded) == plan
    assert submission.decode_argv(argv) == argv  # not encoded: as it is
    parsed = stage_args.parse_args(submission.encode_argv(argv), "stage")
    assert (parsed.inputs, parsed.output, parsed.params) == (["hdfs://nn/raw/dt=1"], "o", params)


# junk, not JSON, not a list
@pytest.mark.parametrize("value", ["not base64!", "bm90IGpzb24", "eyJhIjogMX0="])
def test_a_bad_encoded_argv_is_refused_naming_the_option(value):
    with pytest.raises(ValueError, match="--argv-base64 must be the base64 of a JSON list of strings"):
        submission.decode_argv(["--argv-base64", value])


def test_the_driver_log_gives_back_each_error_files_last_record(capsys, monkeypatch, tmp_path):
    """What the job prints (`failure_recorded`) is what the operator reads from the log."""
    from lakeprep_contracts import stage_errors

    monkeypatch.chdir(tmp_path)  # the file lands in the working directory, as in a container

    for message in ("first", "multi\nline"):
        with pytest.raises(ValueError), failure.failure_recorded("lakeprep-sample.error"):
            raise ValueError(message)
    lines = [
        "26/12/06 12:00:00 INFO lakeprep sample: inputs a -> output b",
        *capsys.readouterr().err.splitlines(),
        stage_errors.RECORD_PREFIX + '{"file": "lakeprep-validate.error", "error": "cut',  # a cut line
    ]
    assert stage_errors.records_in(lines) == {
        "lakeprep-sample.error": {"error": "ValueError: multi\nline", "refusal": True}
    }
