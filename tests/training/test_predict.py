"""predict end to end: raw records -> the trainer's own model and transform -> the trainer's outputs.

The shards here are made from raw CSV rows by the serving path itself, then trained on
by `lakeprep_train.train`; `predict` on the same raw rows must give exactly what the
trainer's evaluation gives for them (`evaluate_split(..., per_row=True)`). That the
encoding equals Spark's is proven in test_transform/test_serving and the parity test.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from lakeprep_jobs.export_shards import feature_schema
from lakeprep_train import predict, serving, train
from lakeprep_train import transform as tf
from lakeprep_train.evaluate import evaluate_split
from lakeprep_train.manifest import load_manifest, with_transform_document
from tests.training import prepared_export
from tests.training.test_serving import HEADER, PLANES
from tests.training.transform_doc import PREPROCESS, VALIDATE, make_doc

SPLITS = {"train": 320, "validation": 64, "test": 64}


def raw_rows(n: int, rng: np.random.Generator) -> list[str]:
    """Flights whose delay follows distance, carrier and the note, so a model can learn it."""
    carriers = np.array(["UA", "B6", "EV", "AA"])
    rows = []
    for i in range(n):
        carrier = carriers[rng.integers(0, 4)]
        distance = float(rng.uniform(100, 2500))
        note = rng.choice(["storm ahead", "clear", "late crew", ""])
        delay = (
            (distance - 1200) / 30
            + 25 * (carrier in ("EV", "AA"))
            + 30 * ("storm" in note)
            + rng.normal(0, 10)
        )
        hour = int(rng.integers(0, 24))
        tail = rng.choice(["N1", "N2", "N3", "N404"])
        distance_text = "NA" if i % 17 == 0 else f"{distance:.1f}"
        rows.append(
            f"2013,1,{1 + i % 28},{carrier},{1000 + i},{distance_text},{delay:.1f},{tail},"
            f"2013-01-{1 + i % 28:02d} {hour:02d}:00:00,{note}"
        )
    return rows


def write_model_inputs(root: Path) -> tuple[Path, Path, dict[str, list[str]]]:
    """Raw CSVs per split, the transform, shards made from the rows, and a valid manifest."""
    rng = np.random.default_rng(3)
    doc = make_doc()
    transform_path = root / "fit_transform" / "transform.json"
    transform_path.parent.mkdir(parents=True)
    transform_path.write_text(json.dumps(doc, indent=2))
    planes = root / "planes.csv"
    planes.write_text(PLANES)
    raw: dict[str, list[str]] = {}
    splits = {}
    features = None
    counts_by_split = {}
    for split, n in SPLITS.items():
        raw[split] = raw_rows(n, rng)
        source = root / f"raw_{split}.csv"
        source.write_text("\n".join([HEADER, *raw[split]]) + "\n")
        served = serving.serve(str(source), doc, references={"planes": str(planes)})
        assert served.rejected == [] and len(served.accepted) == n
        columns = {"id": pa.array(served.features["id"].tolist(), pa.string())}
        columns["label"] = pa.array(served.labels.astype(np.int32), pa.int32())
        for name, values in served.features.items():
            if name.startswith(("num__", "cat__")):
                columns[name] = pa.array(values)
            elif name.startswith("txt__"):
                columns[name] = pa.array(values.tolist(), pa.list_(pa.int32()))
        shard = root / "shards" / split / "shard-00000.parquet"
        shard.parent.mkdir(parents=True)
        pq.write_table(pa.table(columns), shard)
        data = shard.read_bytes()
        counts = np.bincount(served.labels.astype(np.int64), minlength=2)
        counts_by_split[split] = counts
        splits[split] = {
            "rows": n,
            "rows_available": n,
            "class_counts": {"0": int(counts[0]), "1": int(counts[1])},
            "plan": {
                "world_size": 1,
                "batch_size": 32,
                "rows_per_rank": n,
                "steps_per_rank": math.ceil(n / 32),
                "shards_per_rank": 1,
                "remainder": "drop",
            },
            "shards": [
                {
                    "path": f"shards/{split}/{shard.name}",
                    "rank": 0,
                    "rows": n,
                    "bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            ],
        }
        features = feature_schema(doc)  # as the export writes them
    train_counts = counts_by_split["train"]
    manifest = {
        "format_version": 1,
        "dataset": "toy_flights",
        "logical_date": "2013-01-03",
        "run_id": "manual__2013-01-03T00:00:00+00:00",
        "config_hash": "0" * 64,
        "source_partitions": [
            {
                "uri": "file:///lake/sample/toy_flights/dt=2013-01-03",
                "rows": 448,
                "fingerprint": "f" * 64,
                "bytes": 1,
            }
        ],
        "window": {
            "days": ["2013-01-03"],
            "complete": ["2013-01-03"],
            "failed": [],
            "missing": [],
            "before_start": [],
        },
        "transform": {
            "uri": "fit_transform/transform.json",
            "sha256": hashlib.sha256(transform_path.read_bytes()).hexdigest(),
        },
        "label": {"name": "label", "classes": [0, 1]},
        "features": features,
        "splits": splits,
        "class_weights": {str(k): float(train_counts.sum() / (2 * train_counts[k])) for k in range(2)},
    }
    path = root / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path, planes, raw


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained by train.py on shards made from raw rows, and those rows."""
    root = tmp_path_factory.mktemp("predict")
    manifest, planes, raw = write_model_inputs(root)
    out = root / "model"
    torch.set_num_threads(1)
    code = train.main(
        [
            "--manifest",
            str(manifest),
            "--output",
            str(out),
            "--epochs",
            "3",
            "--lr",
            "1e-2",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    return {"root": root, "manifest": manifest, "planes": planes, "raw": raw, "model": out}


def test_the_trainer_copies_the_transform_beside_the_model(trained):
    copied = (trained["model"] / "transform.json").read_bytes()
    assert copied == (trained["root"] / "fit_transform" / "transform.json").read_bytes()
    assert not list(trained["model"].glob("*.partial*"))


def test_predict_gives_the_trainers_own_evaluation_outputs(trained, tmp_path, capsys):
    manifest = load_manifest(str(trained["manifest"]))
    loaded = predict.load_model(str(trained["model"]))
    evaluated = evaluate_split(loaded.model, manifest, "test", torch.device("cpu"), per_row=True)
    assert len(evaluated["outputs"]) == SPLITS["test"]

    bad = "2013,1,5,UA,x,1,1,N1,2013-01-01,"
    source = tmp_path / "score.csv"
    source.write_text(
        "\n".join([HEADER, *trained["raw"]["test"][:30], bad, *trained["raw"]["test"][30:]]) + "\n"
    )
    output = tmp_path / "predictions.jsonl"
    code = predict.main(
        [
            "--model",
            str(trained["model"]),
            "--input",
            str(source),
            "--reference",
            f"planes={trained['planes']}",
            "--output",
            str(output),
        ]
    )
    assert code == 0
    assert f"{source}: rows read 65 = accepted 64 + rejected 1" in capsys.readouterr().err
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == 65 and [r["row"] for r in rows] == list(range(65))
    assert rows[30] == {"row": 30, "line": 32, "id": None, "reason": "bad int in flight: x"}
    scored = [r for r in rows if "reason" not in r]
    assert {r["id"] for r in scored} == set(evaluated["outputs"])
    for r in scored:
        expected = evaluated["outputs"][r["id"]]
        got = [r["probabilities"]["0"], r["probabilities"]["1"]]
        assert got == pytest.approx(expected, abs=1e-6)
        assert r["prediction"] == (1 if expected[1] > 0.5 else 0)
    accuracy = np.mean([r["prediction"] == r["label"] for r in scored])
    assert accuracy == pytest.approx(evaluated["accuracy"])
    assert accuracy > evaluated["baseline"]["accuracy"]


def test_predict_writes_parquet(trained, tmp_path):
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *trained["raw"]["validation"][:5], "2013,1,5"]) + "\n")
    output = tmp_path / "predictions.parquet"
    args = ["--model", str(trained["model"]), "--input", str(source), "--output", str(output)]
    assert predict.main([*args, "--reference", f"planes={trained['planes']}"]) == 0
    table = pq.read_table(output)
    assert table.column_names == [
        "row",
        "line",
        "id",
        "label",
        "label_reason",
        "prediction",
        "probability__0",
        "probability__1",
        "reason",
    ]
    assert table.column("reason").to_pylist() == [None] * 5 + ["malformed record"]
    p0, p1 = table.column("probability__0").to_pylist()[:5], table.column("probability__1").to_pylist()[:5]
    assert all(abs(a + b - 1) < 1e-9 for a, b in zip(p0, p1, strict=True))


def with_delay(row: str, delay: str) -> str:
    """A raw row with another arr_delay (the label's source): "" is blank, "NA" a null token."""
    fields = row.split(",")
    fields[HEADER.split(",").index("arr_delay")] = delay
    return ",".join(fields)


def test_predict_scores_rows_whose_label_is_blank_from_csv_and_json_lines(trained, tmp_path, capsys):
    labelled = trained["raw"]["validation"][:3]
    rows = [*labelled, with_delay(labelled[0], ""), with_delay(labelled[1], "NA")]
    csv = tmp_path / "score.csv"
    csv.write_text("\n".join([HEADER, *rows, "2013,1,5"]) + "\n")
    names = HEADER.split(",")
    jsonl = tmp_path / "score.jsonl"
    records = [json.dumps(dict(zip(names, row.split(","), strict=True))) for row in rows]
    jsonl.write_text("\n".join([*records, '{"year": 2013'] + [""]))
    outputs = {}
    for source in (csv, jsonl):
        output = tmp_path / f"{source.suffix[1:]}.jsonl"
        args = ["--model", str(trained["model"]), "--input", str(source), "--output", str(output)]
        assert predict.main([*args, "--reference", f"planes={trained['planes']}"]) == 0
        err = capsys.readouterr().err
        assert f"{source}: rows read 6 = accepted 5 + rejected 1" in err
        assert "accepted rows with a label: 3 of 5" in err and "scored without their label" not in err
        out = [json.loads(line) for line in output.read_text().splitlines()]
        assert [r["row"] for r in out] == list(range(6)) and out[5]["reason"] == "malformed record"
        assert ["label" in r for r in out[:5]] == [True, True, True, False, False]
        assert not any("reason" in r or "label_reason" in r for r in out[:5])
        # A row scores the same with its label blank: the label is no feature (a batch's
        # float32 arithmetic may differ in the last bits from row to row).
        for blank, same in ((3, 0), (4, 1)):
            assert out[blank]["prediction"] == out[same]["prediction"]
            assert out[blank]["probabilities"] == pytest.approx(out[same]["probabilities"], abs=1e-6)
        outputs[source.suffix] = out
    # The same records either way (a JSON-lines file has no header line).
    assert [{**r, "line": r["line"] - 1} for r in outputs[".csv"]] == outputs[".jsonl"]


def test_predict_scores_a_row_whose_label_is_not_a_class_and_says_why(trained, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(trained["model"], folder)
    doc = json.loads((folder / "transform.json").read_text())
    (label,) = [d for d in doc["contract"]["validate"]["derived"] if d["name"] == "delayed"]
    label["expr"] = "CAST(arr_delay > 15 AS INT) * 2"  # a feed whose label coding changed: 0 or 2
    (folder / "transform.json").write_text(json.dumps(doc))
    rows = [with_delay(trained["raw"]["validation"][0], d) for d in ("40", "-5", "")]
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *rows]) + "\n")
    output = tmp_path / "predictions.parquet"
    args = ["--model", str(folder), "--input", str(source), "--output", str(output)]
    assert predict.main([*args, "--reference", f"planes={trained['planes']}"]) == 0
    err = capsys.readouterr().err
    assert f"{source}: rows read 3 = accepted 3 + rejected 0" in err
    assert "accepted rows with a label: 1 of 3" in err
    assert "scored without their label, by reason: {'label delayed not in [0, 1]': 1}" in err
    table = pq.read_table(output)
    assert table.column("label").to_pylist() == [None, 0, None]
    assert table.column("label_reason").to_pylist() == ["label delayed not in [0, 1]: 2", None, None]
    assert table.column("reason").to_pylist() == [None] * 3
    p1 = table.column("probability__1").to_pylist()  # one row, three labels
    assert p1 == pytest.approx([p1[0]] * 3, abs=1e-6)


def test_predict_without_the_reference_names_the_flag(trained, tmp_path, capsys):
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *trained["raw"]["validation"][:2]]) + "\n")
    assert predict.main(["--model", str(trained["model"]), "--input", str(source)]) == 2
    assert "--reference planes=PATH" in capsys.readouterr().err


def test_predict_joins_the_reference_snapshot_of_the_date_given(trained, tmp_path, capsys):
    """A folder of dated snapshots: the newest complete one, or --reference-date's."""
    folder = tmp_path / "planes"
    for day in ("2013-01-01", "2013-02-01"):
        (folder / f"dt={day}").mkdir(parents=True)
        shutil.copy(trained["planes"], folder / f"dt={day}" / "planes.csv")
        (folder / f"dt={day}" / "_SUCCESS").write_text("")
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *trained["raw"]["validation"][:2]]) + "\n")
    args = ["--model", str(trained["model"]), "--input", str(source), "--reference", f"planes={folder}"]
    assert predict.main([*args, "--output", str(tmp_path / "p.jsonl")]) == 0
    assert f"reference planes: {folder}/dt=2013-02-01 (snapshot 2013-02-01)" in capsys.readouterr().err
    assert predict.main([*args, "--reference-date", "2013-01-15", "--output", str(tmp_path / "p.jsonl")]) == 0
    assert f"reference planes: {folder}/dt=2013-01-01 (snapshot 2013-01-01)" in capsys.readouterr().err
    assert predict.main([*args, "--reference-date", "2012-12-31"]) == 2
    assert "reference 'planes'" in capsys.readouterr().err


def test_a_model_folder_without_its_transform_cannot_serve(trained, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(trained["model"] / "model.pt", folder / "model.pt")
    with pytest.raises(predict.ModelFolderError, match="transform.json: missing"):
        predict.load_model(str(folder))


def test_a_transform_that_does_not_fit_the_model_is_refused(trained, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(trained["model"], folder)
    doc = json.loads((folder / "transform.json").read_text())
    doc["categorical"][0]["vocabulary"].append("WN")
    doc["categorical"][0]["counts"].append(1)
    doc["categorical"][0]["cardinality"] += 1
    (folder / "transform.json").write_text(json.dumps(doc))
    with pytest.raises(predict.ModelFolderError, match="cat__carrier: model cardinality 5, transform 6"):
        predict.load_model(str(folder))


def test_training_refuses_a_transform_whose_sha256_differs(trained, tmp_path, caplog):
    root = tmp_path / "export"
    shutil.copytree(trained["root"], root, ignore=shutil.ignore_patterns("model"))
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["transform"]["sha256"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(manifest))
    actual = hashlib.sha256((root / "fit_transform" / "transform.json").read_bytes()).hexdigest()
    code = train.main(
        ["--manifest", str(root / "manifest.json"), "--output", str(tmp_path / "m"), "--epochs", "1"]
    )
    assert code == 2
    assert f"transform.sha256 is {'0' * 64}, but " in caplog.text and f"has sha256 {actual}" in caplog.text
    assert not (tmp_path / "m").exists()


def test_training_without_a_transform_says_so_and_writes_none(trained, tmp_path, caplog):
    root = tmp_path / "export"
    shutil.copytree(trained["root"], root, ignore=shutil.ignore_patterns("model"))
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["transform"] = None
    (root / "manifest.json").write_text(json.dumps(manifest))
    caplog.set_level("INFO", logger="lakeprep_train")
    out = tmp_path / "m"
    assert train.main(["--manifest", str(root / "manifest.json"), "--output", str(out), "--epochs", "1"]) == 0
    assert "has no transform: model folder will not hold transform.json" in caplog.text
    assert (out / "model.pt").exists() and not (out / "transform.json").exists()


# ------------------------------------------------------------- a continuous label: regression

BINS = 4


def regression_doc() -> dict:
    """The flights transform with `arr_delay` as a continuous label (lakeprep_contracts.labels):
    validate reads it as a number, the transform's label.target standardises it."""
    validate = {k: v for k, v in VALIDATE.items() if k != "label_classes"}
    validate.update(label_column="arr_delay", label_type="continuous")
    validate["derived"] = [d for d in VALIDATE["derived"] if d["name"] != "delayed"]  # no class label
    doc = make_doc(
        validate=validate, preprocess={**PREPROCESS, "label_column": "arr_delay", "label_bins": BINS}
    )
    doc["label"] = {
        "column": "arr_delay",
        "output": "label",
        "classes": list(range(BINS)),
        "type": "continuous",
        "target": {"column": "target", "rows": 2, "mean": 0.0, "std": 1.0},  # fitted below
    }
    return doc


def prepared_split(source: Path, doc: dict, planes: Path) -> pa.Table:
    """A split's raw CSV as the sample stage writes it: the prepared columns the transform
    reads (serving's contract, reference join and cleaning), `target` the label's value and
    `label` its quartile bin."""
    contract = serving.Contract.from_params(doc["contract"]["validate"])
    checked = serving.check_contract(serving.read_records(str(source), contract), contract)
    assert all(r is None for r in checked.reasons)
    refs = doc["contract"]["preprocess"]["references"]
    table = serving.join_references(checked.table, refs, {"planes": str(planes)}, contract.time_zone)
    columns = {name: table.column(name) for name in table.column_names}
    prepared = tf.prepare(columns, doc, zone=contract.time_zone)
    values = tf.clean_numeric(table.column("arr_delay"))
    ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable")
    return pa.table(
        {
            "id": tf.spark_string(table.column("flight_id")),
            "label": pa.array(ranks * BINS // len(values), pa.int32()),
            "target": pa.array(values),
            **prepared,
        }
    )


def write_regression_inputs(root: Path) -> tuple[Path, Path, dict[str, list[str]]]:
    """Raw CSVs per split, their prepared shards, the transform with the train split's
    target mean and std, and a "prepared" manifest over them."""
    rng = np.random.default_rng(5)
    doc = regression_doc()
    planes = root / "planes.csv"
    planes.write_text(PLANES)
    raw: dict[str, list[str]] = {}
    tables = {}
    for split, n in SPLITS.items():
        raw[split] = raw_rows(n, rng)
        source = root / f"raw_{split}.csv"
        source.write_text("\n".join([HEADER, *raw[split]]) + "\n")
        tables[split] = prepared_split(source, doc, planes)
    train_values = tables["train"].column("target").to_numpy()
    doc["label"]["target"] |= {
        "rows": len(train_values),
        "mean": float(train_values.mean()),
        "std": float(train_values.std(ddof=1)),
    }
    data = json.dumps(tf.check_document(doc), indent=2).encode()
    (root / "transform.json").write_bytes(data)
    splits = {}
    for split, table in tables.items():
        entry = prepared_export.write_file(table, root / "shards" / f"{split}-00000.parquet", 64)
        bins = table.column("label").to_numpy()
        n = table.num_rows
        splits[split] = {
            "rows": n,
            "rows_available": n,
            "class_counts": {str(b): int((bins == b).sum()) for b in range(BINS)},
            "plan": {
                "world_size": 1,
                "batch_size": 32,
                "rows_per_rank": n,
                "steps_per_rank": math.ceil(n / 32),
                "shards_per_rank": 1,
                "remainder": "drop",
            },
            "shards": [{**entry, "rank": 0, "rows": n}],
        }
    features = feature_schema(doc)  # as the export writes them
    manifest = {
        "format_version": 1,
        "dataset": "toy_flights",
        "logical_date": "2013-01-03",
        "run_id": "manual__2013-01-03T00:00:00+00:00",
        "config_hash": "0" * 64,
        "source_partitions": [
            {"uri": "file:///lake/sample/toy_flights/dt=2013-01-03", "rows": 448, "fingerprint": "f" * 64}
        ],
        "window": {
            "days": ["2013-01-03"],
            "complete": ["2013-01-03"],
            "failed": [],
            "missing": [],
            "before_start": [],
        },
        "shard_columns": "prepared",
        "transform": {"uri": "transform.json", "sha256": hashlib.sha256(data).hexdigest()},
        "label": {"name": "label", "classes": list(range(BINS))},
        "features": features,
        "splits": splits,
        "class_weights": {str(b): 1.0 for b in range(BINS)},
    }
    path = root / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2))
    return path, planes, raw


@pytest.fixture(scope="module")
def regressed(tmp_path_factory):
    """A regression of the delay, trained by train.py on prepared shards of raw rows."""
    root = tmp_path_factory.mktemp("predict-regression")
    manifest, planes, raw = write_regression_inputs(root)
    out = root / "model"
    torch.set_num_threads(1)
    argv = ["--manifest", str(manifest), "--output", str(out), "--epochs", "5", "--lr", "1e-2"]
    assert train.main([*argv, "--device", "cpu", "--seed", "3"]) == 0
    return {"root": root, "manifest": manifest, "planes": planes, "raw": raw, "model": out}


def test_predict_prints_a_regressions_values_as_the_trainer_evaluates_them(regressed, tmp_path, capsys):
    manifest = with_transform_document(load_manifest(str(regressed["manifest"])))
    loaded = predict.load_model(str(regressed["model"]))
    assert loaded.target == json.loads((regressed["root"] / "transform.json").read_text())["label"]["target"]
    evaluated = evaluate_split(loaded.model, manifest, "test", torch.device("cpu"), per_row=True)
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *regressed["raw"]["test"]]) + "\n")
    output = tmp_path / "predictions.jsonl"
    args = ["--model", str(regressed["model"]), "--input", str(source), "--output", str(output)]
    assert predict.main([*args, "--reference", f"planes={regressed['planes']}"]) == 0
    assert "accepted rows with a label: 64 of 64" in capsys.readouterr().err
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == SPLITS["test"] and {r["id"] for r in rows} == set(evaluated["outputs"])
    for r in rows:
        assert "probabilities" not in r and isinstance(r["prediction"], float)
        # The value on the label's scale (the output * std + mean), the trainer's own.
        assert r["prediction"] == pytest.approx(evaluated["outputs"][r["id"]], rel=1e-6, abs=1e-6)
    delays = [float(row.split(",")[HEADER.split(",").index("arr_delay")]) for row in regressed["raw"]["test"]]
    assert [r["label"] for r in rows] == delays
    # The model beats predicting the train mean on these rows, as the trainer scored them.
    errors = np.abs(np.array([r["prediction"] for r in rows]) - delays)
    assert errors.mean() == pytest.approx(evaluated["mae"], rel=1e-6)
    assert evaluated["mae"] < evaluated["baseline"]["mae"]


def test_predict_scores_a_regression_row_whose_label_is_not_a_number_and_says_why(
    regressed, tmp_path, capsys
):
    rows = [with_delay(regressed["raw"]["validation"][0], d) for d in ("12.5", "late", "", "Infinity")]
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *rows]) + "\n")
    output = tmp_path / "predictions.parquet"
    args = ["--model", str(regressed["model"]), "--input", str(source), "--output", str(output)]
    assert predict.main([*args, "--reference", f"planes={regressed['planes']}"]) == 0
    err = capsys.readouterr().err
    assert f"{source}: rows read 4 = accepted 4 + rejected 0" in err
    assert "accepted rows with a label: 1 of 4" in err
    assert "scored without their label, by reason: {'bad double in arr_delay': 1, 'non-finite double" in err
    table = pq.read_table(output)
    assert table.column_names == ["row", "line", "id", "label", "label_reason", "prediction", "reason"]
    assert table.schema.field("prediction").type == pa.float64() == table.schema.field("label").type
    assert table.column("label").to_pylist() == [12.5, None, None, None]
    assert table.column("label_reason").to_pylist() == [
        None,
        "bad double in arr_delay: late",
        None,
        "non-finite double in arr_delay: Infinity",
    ]
    predictions = table.column("prediction").to_pylist()  # one row, four labels: one value
    assert predictions == pytest.approx([predictions[0]] * 4, abs=1e-6)


def test_a_string_label_that_is_not_a_finite_number_is_named_as_validate_names_it(
    regressed, tmp_path, capsys
):
    folder = tmp_path / "model"
    shutil.copytree(regressed["model"], folder)
    doc = json.loads((folder / "transform.json").read_text())
    (column,) = [c for c in doc["contract"]["validate"]["columns"] if c["name"] == "arr_delay"]
    column["type"] = "string"  # a feed that sends the label as text: validate's try_cast to double
    (folder / "transform.json").write_text(json.dumps(doc))
    rows = [with_delay(regressed["raw"]["validation"][0], d) for d in ("7", "late", "NaN")]
    source = tmp_path / "score.csv"
    source.write_text("\n".join([HEADER, *rows]) + "\n")
    output = tmp_path / "predictions.jsonl"
    args = ["--model", str(folder), "--input", str(source), "--output", str(output)]
    assert predict.main([*args, "--reference", f"planes={regressed['planes']}"]) == 0
    out = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r.get("label") for r in out] == [7.0, None, None]
    assert [r.get("label_reason") for r in out] == [
        None,
        "label arr_delay is not a finite number: late",
        "label arr_delay is not a finite number: NaN",
    ]


def test_a_transform_whose_target_differs_from_the_models_is_refused(regressed, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(regressed["model"], folder)
    doc = json.loads((folder / "transform.json").read_text())
    doc["label"]["target"]["mean"] += 1.0
    (folder / "transform.json").write_text(json.dumps(doc))
    with pytest.raises(predict.ModelFolderError, match=r"label 'arr_delay' is continuous: the transform"):
        predict.load_model(str(folder))
    doc["label"] = {"column": "arr_delay", "output": "label", "classes": doc["label"]["classes"]}
    (folder / "transform.json").write_text(json.dumps(doc))
    with pytest.raises(predict.ModelFolderError, match=r"the model regresses a continuous label"):
        predict.load_model(str(folder))
