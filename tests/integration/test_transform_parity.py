"""The two cleanings of raw records agree: Spark's (preprocess, for training) and numpy's (serving).

One encoder applies a transform.json (`lakeprep_contracts.encode`); what differs between
training and serving is step 2, how raw records become prepared columns: Spark's casts,
trim and RegexTokenizer in preprocess, their mirrors in `lakeprep_train.transform`. The
same held-out rows, with what training never saw (unseen categories, nulls, NaN, blanks,
unicode and very long text), go through preprocess's `clean_features` then
`lakeprep_jobs.transform.apply_transform` (the encoder on the executors), and through
`lakeprep_train.transform.apply_transform`. Same ids, the same ids for every categorical
and token, the same float32 numerics bit for bit: scaled columns, and principal
components of a document whose selection dropped features.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_contracts import encode
from lakeprep_train import transform as numpy_transform
from tests.training.transform_doc import hashed, make_doc, numeric, vocab

pytestmark = pytest.mark.integration

DDL = (
    "flight_id string, delayed int, distance double, seats double, air_time int, carrier string, "
    "origin string, day_of_week bigint, plane_model string, note string"
)
LONG_TEXT = "Storm warning ÄÖÜ late gate " * 40_000  # ~1 MB, cut by text_max_length
ROWS = [
    ("a-1", 1, 1400.0, 160.0, 200, "UA", "JFK", 7, "BOEING 737-824", "late storm"),
    ("a-2", 0, None, math.nan, None, " B6 ", "LGA", 1, None, None),
    ("a-3", 0, math.nan, None, -5, "ZZ", "", None, "", ""),
    ("a-4", 1, 99999.0, 1.0e9, 10**6, None, None, 3, "Airbus A320-214 " * 20, "LATE!!! late, late"),
    ("a-5", 0, -3.25, 0.0, 0, "", "  ", 2, "ÉCOLE Straße 𝐀𝐁 日本語", LONG_TEXT),
    ("a-6", 1, 0.1, 300.5, 15, "ev", "EWR", 5, "EMBRAER\tERJ 145\nXR", "ünseen wörds 😀"),
    # Categoricals padded with tab, line feed, carriage return and the like are trimmed;
    # a no-break space is part of the value.
    ("a-7", 0, 500.0, 100.0, 30, "\tUA\t", "JFK\n", 4, "x", "late"),
    ("a-8", 1, 600.0, 120.0, 40, "\r\nB6 \t", "\x0bLGA\x0c", 6, None, "storm"),
    ("a-9", 0, 700.0, 130.0, 50, "\u00a0EV", " \t\r\n", 2, "y", None),
]


def parity_doc() -> dict:
    doc = make_doc(
        numerics=[
            numeric(
                "distance",
                impute="median",
                fill=1000.0,
                clip={"lower": 100.0, "upper": 2000.0, "quantiles": [0.01, 0.99]},
                scaling="robust",
                center=872.5,
                scale=613.25,
            ),
            numeric("seats", fill=151.37, scaling="standard", center=142.11, scale=71.9),
            numeric("air_time", fill=133.3, scaling="minmax", center=20.0, scale=675.0),
        ],
        categoricals=[
            vocab("carrier", ["UA", "B6", "EV"]),
            hashed("origin", 1024),
            hashed("day_of_week", 16),
        ],
        texts=[
            hashed("plane_model", 4096, role="text", max_tokens=8),
            vocab("note", ["late", "storm", "warning", "gate"], role="text", max_tokens=5),
        ],
    )
    pre = doc["contract"]["preprocess"]
    pre.update(numeric=["distance", "seats", "air_time"], categorical=["carrier", "origin", "day_of_week"])
    pre["text_max_length"] = 2000
    return numpy_transform.check_document(doc)


def pca_parity_doc() -> dict:
    """parity_doc after selection and PCA: origin dropped, the numerics projected on 2 components.

    Means away from 0 (robust and minmax scalings) and weights with long decimal
    expansions: the centring and every SQL literal are exercised.
    """
    doc = parity_doc()
    inputs = doc["numeric"]
    doc["numeric"] = [
        {"name": "pc1", "output": "num__pc1", "pca_component": 1},
        {"name": "pc2", "output": "num__pc2", "pca_component": 2},
    ]
    doc["pca"] = {
        "method": "PCA",
        "k": 2,
        "variance_target": 0.9,
        "inputs": inputs,
        "mean": [0.0312, -0.0147, 0.1713],
        "components": [
            [0.6123724356957946, 0.5773502691896258, 0.5400617248673217],
            [-0.7071067811865475, 0.1924500897298753, 0.6804138174397717],
        ],
        "explained_variance": [0.6180339887498949, 0.3090169943749474],
        "outputs": ["num__pc1", "num__pc2"],
    }
    doc["categorical"] = [c for c in doc["categorical"] if c["name"] != "origin"]
    reason = "chi-squared p-value 0.73 is not below fpr 0.05"
    doc["dropped"] = [{"name": "origin", "reason": reason}]
    doc["selection"] = {
        "variance_threshold": None,
        "univariate": {
            "method": "UnivariateFeatureSelector",
            "mode": "fpr",
            "threshold": 0.05,
            "label_type": "categorical",
            "scores": [
                {
                    "name": "origin",
                    "output": "cat__origin",
                    "test": "chi_squared",
                    "statistic": 0.63,
                    "p_value": 0.73,
                    "degrees_of_freedom": 2,
                    "kept": False,
                    "reason": reason,
                }
            ],
        },
    }
    return numpy_transform.check_document(doc)


def test_spark_and_numpy_give_the_same_features(spark):
    spark_rows, ours = _both_paths(spark, parity_doc())
    # The rows were chosen to reach every branch: unseen, missing and known ids all occur.
    assert {0, 1, 2, 3} <= set(ours["cat__carrier"].tolist())
    assert (ours["txt__note"] == 1).any() and (ours["txt__note"] == 0).any()
    # Padded with tab, LF or CR: the known category; a no-break space: unseen; blank: missing.
    carrier = dict(zip(ours["id"].tolist(), ours["cat__carrier"].tolist(), strict=True))
    assert (carrier["a-7"], carrier["a-8"], carrier["a-9"]) == (carrier["a-1"], carrier["a-2"], 1)
    origin = dict(zip(ours["id"].tolist(), ours["cat__origin"].tolist(), strict=True))
    assert (origin["a-7"], origin["a-8"], origin["a-9"]) == (origin["a-1"], origin["a-2"], 0)


def test_spark_and_numpy_agree_after_selection_and_pca(spark):
    spark_rows, ours = _both_paths(spark, pca_parity_doc())
    assert set(spark_rows[0]) == {"id", "label", *encode.outputs(pca_parity_doc())}
    assert "cat__origin" not in ours and "num__distance" not in ours
    # The extreme rows (clipped, imputed, 1e9 seats) land far from the centre: not all zeros.
    assert np.ptp(ours["num__pc1"]) > 1 and np.ptp(ours["num__pc2"]) > 1


def _both_paths(spark, doc: dict) -> tuple[list[dict], dict[str, np.ndarray]]:
    """(Spark's rows by id, numpy's columns in the same order), asserted equal feature by feature."""
    from lakeprep_jobs import preprocess
    from lakeprep_jobs import transform as spark_transform

    fields = {f.name for f in dataclasses.fields(preprocess.PreprocessParams)}
    params = preprocess.PreprocessParams(
        **{k: v for k, v in doc["contract"]["preprocess"].items() if k in fields}
    )
    df = spark.createDataFrame(ROWS, DDL)
    encoded = spark_transform.apply_transform(preprocess.clean_features(df, params), doc)
    spark_rows = sorted((r.asDict() for r in encoded.collect()), key=lambda r: r["id"])

    names = DDL.replace(",", "").split()[::2]
    table = pa.table(
        {name: pa.array([row[i] for row in ROWS], type=_arrow(kind)) for i, (name, kind) in enumerate(_ddl())}
    )
    assert names == table.column_names
    ours = numpy_transform.apply_transform(table, doc)
    order = np.argsort(ours["id"])
    ours = {name: values[order] for name, values in ours.items()}

    assert ours["id"].tolist() == [r["id"] for r in spark_rows]
    assert ours["label"].tolist() == [r["label"] for r in spark_rows]
    for output in encode.outputs(doc):
        theirs = [r[output] for r in spark_rows]
        mine = ours[output]
        if output.startswith("num__"):
            assert np.isfinite(mine).all()
        assert mine.tolist() == theirs, output
    return spark_rows, ours


def _ddl() -> list[tuple[str, str]]:
    return [tuple(part.strip().split()) for part in DDL.split(",")]


def _arrow(kind: str) -> pa.DataType:
    return {"string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64()}[kind]
