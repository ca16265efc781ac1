"""No secret reaches a task log through a stage's rendered spark-submit command.

Spark settings that carry credentials (S3A keys, SSL passwords) are masked by the Spark
provider wherever it prints the command (`Spark-Submit cmd: ...`, a failure's
`Cannot execute: ...`). lakeprep adds its own conf and arguments to that command, so
this checks the provider still masks what lakeprep renders, and that lakeprep's own
log line (the stage's arguments) carries no Spark conf at all.
"""

from __future__ import annotations

from pathlib import Path

from lakeprep_airflow.operators.spark_stage import SparkStageOperator

FLIGHTS = str(Path(__file__).resolve().parents[2] / "pipelines" / "flights.yaml")
SECRETS = {
    "spark.hadoop.fs.s3a.secret.key": "s3a-secret-value-1",
    "spark.ssl.keyStorePassword": "keystore-password-value-2",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net.secret": "azure-secret-value-3",
}


def test_the_rendered_command_masks_every_credential(monkeypatch, capsys):
    monkeypatch.setenv("AIRFLOW_CONN_LAKEPREP_MASK_SPARK", "spark://127.0.0.1:7077?deploy-mode=client")
    op = SparkStageOperator(
        task_id="validate",
        stage="validate",
        spec_path=FLIGHTS,
        lake_root="hdfs://nn:8020/lake",
        run_ds="2013-01-02",
        conn_id="lakeprep_mask_spark",
        conf=dict(SECRETS),
    )
    op.prepare_submission("manual__x")
    hook = op._get_hook()
    capsys.readouterr()
    cmd = hook._build_spark_submit_command(op.application)
    # The secrets are in the command spark-submit gets (it needs them) ...
    for key, value in SECRETS.items():
        assert f"{key}={value}" in cmd
    # ... and nowhere in what is logged or put into an exception.
    logged = "".join(capsys.readouterr())  # Airflow's structlog writes the task log lines here
    assert "Spark-Submit cmd" in logged
    masked = hook._mask_cmd(cmd)
    for value in SECRETS.values():
        assert value not in logged and value not in masked
    assert " ".join(op.application_args).count("spark.") == 0
