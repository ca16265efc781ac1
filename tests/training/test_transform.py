"""The numpy/pyarrow transform: encodings per docs/TRANSFORM.md, and Spark's behaviour proven equal.

The parity tests run the same values through Spark (the session-scoped `spark` fixture)
and through `lakeprep_train.transform`, and compare: hashing, tokenization, string
casts of every contract type and Spark's rendering of values as strings.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest

from lakeprep_contracts import encode as enc
from lakeprep_train import transform as tf
from tests.training.transform_doc import hashed, make_doc, numeric, vocab


@pytest.fixture
def spark_zone(spark):
    """Set Spark's session time zone for one test, then put UTC back."""

    def set_zone(zone: str):
        spark.conf.set("spark.sql.session.timeZone", zone)
        return spark

    yield set_zone
    spark.conf.set("spark.sql.session.timeZone", "UTC")


# ----------------------------------------------------------------- document checks


def test_a_valid_document_loads_from_a_file(tmp_path):
    path = tmp_path / "transform.json"
    path.write_text(json.dumps(make_doc()))
    doc = tf.load_transform(str(path))
    assert enc.outputs(doc) == [
        "num__distance",
        "num__seats",
        "cat__carrier",
        "cat__day_of_week",
        "txt__plane_model",
        "txt__note",
    ]


def test_the_schema_refuses_a_bad_document_naming_the_field(tmp_path):
    doc = make_doc()
    doc["numeric"][1]["scale"] = 0
    doc["categorical"][1]["buckets"] = 1
    del doc["hash"]
    path = tmp_path / "transform.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(tf.TransformError) as err:
        tf.load_transform(str(path))
    message = str(err.value)
    assert str(path) in message
    assert "numeric[1].scale: 0 is less than or equal to the minimum of 0" in message
    assert "categorical[1].buckets" in message
    assert "'hash' is a required property" in message


def test_what_the_schema_cannot_say_is_checked_too():
    doc = make_doc(
        categoricals=[vocab("carrier", ["UA", "B6", "UA"]), hashed("day_of_week", 16, cardinality=8)]
    )
    with pytest.raises(tf.TransformError) as err:
        tf.check_document(doc, "run/transform.json")
    message = str(err.value)
    assert "categorical[0] (carrier).vocabulary: holds duplicate values" in message
    assert "categorical[1] (day_of_week).cardinality: 8 != buckets 16" in message


def test_a_tokenizer_pattern_with_no_faithful_translation_is_refused_at_load():
    text = vocab(
        "note",
        ["late"],
        role="text",
        tokenizer={"pattern": r"[\W_]+", "lowercase": True, "min_token_length": 1},
    )
    with pytest.raises(tf.TransformError, match=r"text\[0\] \(note\)\.tokenizer\.pattern: .*\\W inside"):
        tf.check_document(make_doc(texts=[text]))


def test_a_document_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "transform.json"
    path.write_text("{not json")
    with pytest.raises(tf.TransformError, match=f"{path}: not a JSON document"):
        tf.load_transform(str(path))


# ------------------------------------------------------------------------ numerics

VALUES = pa.array([1.0, None, math.nan, 100.0, -50.0, 7.0])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # standard: mean 5 and sample std 2 as recorded; fill (mean) 10
        (
            numeric("x", impute="mean", fill=10.0, scaling="standard", center=5.0, scale=2.0),
            [-2.0, 2.5, 2.5, 47.5, -27.5, 1.0],
        ),
        # minmax: min -50, max - min = 150; fill (median) 7
        (
            numeric("x", impute="median", fill=7.0, scaling="minmax", center=-50.0, scale=150.0),
            [0.34, 0.38, 0.38, 1.0, 0.0, 0.38],
        ),
        # robust: median 4, interquartile range 8
        (
            numeric("x", impute="median", fill=4.0, scaling="robust", center=4.0, scale=8.0),
            [-0.375, 0.0, 0.0, 12.0, -6.75, 0.375],
        ),
        # none: only filled
        (numeric("x", impute="mean", fill=-1.0, scaling="none"), [1.0, -1.0, -1.0, 100.0, -50.0, 7.0]),
    ],
    ids=["standard", "minmax", "robust", "none"],
)
def test_numeric_scalings_fill_null_and_nan(spec, expected):
    out = enc.encode_numeric(tf.clean_numeric(VALUES), spec)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.asarray(expected, dtype=np.float32), rtol=0, atol=1e-6)


def test_clipping_applies_after_the_fill_and_before_scaling():
    spec = numeric(
        "x",
        fill=200.0,
        clip={"lower": 0.0, "upper": 50.0, "quantiles": [0.05, 0.95]},
        scaling="standard",
        center=10.0,
        scale=4.0,
    )
    out = enc.encode_numeric(tf.clean_numeric(VALUES), spec)
    # 1 -> 1; null, NaN -> 200 -> 50; 100 -> 50; -50 -> 0; 7 -> 7
    np.testing.assert_allclose(out, [-2.25, 10.0, 10.0, 10.0, -2.5, -0.75], atol=1e-6)


def test_numeric_inputs_of_other_types_cast_to_double():
    assert tf.clean_numeric(pa.array([True, False, None])).tolist()[:2] == [1.0, 0.0]
    assert tf.clean_numeric(pa.array([3, None], pa.int32())).tolist()[0] == 3.0
    strings = tf.clean_numeric(pa.array(["2.5", " 1e3 ", "1_000", "x", None]))
    assert strings[:2].tolist() == [2.5, 1000.0] and np.isnan(strings[2:]).all()
    with pytest.raises(tf.TransformError, match="numeric 'd'.*date32"):
        tf.clean_numeric(pa.array([0], pa.date32()), where="numeric 'd'")


# ----------------------------------------------------------- selection and PCA


def pca_doc() -> dict:
    """Two inputs projected on two components: weights and means chosen to compute by hand."""
    inputs = [
        numeric("x", fill=10.0, scaling="standard", center=10.0, scale=2.0),
        numeric("y", fill=0.0, scaling="minmax", center=0.0, scale=4.0),
    ]
    doc = make_doc(
        numerics=[
            {"name": "pc1", "output": "num__pc1", "pca_component": 1},
            {"name": "pc2", "output": "num__pc2", "pca_component": 2},
        ],
        categoricals=[],
        texts=[],
    )
    doc["pca"] = {
        "method": "PCA",
        "k": 2,
        "variance_target": None,
        "inputs": inputs,
        "mean": [0.5, 0.25],
        "components": [[0.6, 0.8], [-0.8, 0.6]],
        "explained_variance": [0.7, 0.3],
        "outputs": ["num__pc1", "num__pc2"],
    }
    doc["dropped"] = [{"name": "flat", "reason": "variance 0 <= min_variance 1e-06"}]
    doc["selection"] = {
        "variance_threshold": {
            "method": "VarianceThresholdSelector",
            "threshold": 1e-6,
            "scores": [
                {
                    "name": "flat",
                    "output": "num__flat",
                    "test": "variance",
                    "statistic": 0.0,
                    "p_value": None,
                    "degrees_of_freedom": None,
                    "kept": False,
                    "reason": "variance 0 <= min_variance 1e-06",
                }
            ],
        },
        "univariate": None,
    }
    return tf.check_document(doc)


def test_pca_components_are_centred_weighted_sums_of_the_scaled_inputs():
    doc = pca_doc()
    assert enc.outputs(doc) == ["num__pc1", "num__pc2"]
    out = tf.apply_transform({"x": pa.array([12.0, None]), "y": pa.array([2.0, 4.0])}, doc)
    # scaled x = [1, 0 (the fill)], y = [0.5, 1]; centred [0.5, -0.5] and [0.25, 0.75]
    assert set(out) == {"num__pc1", "num__pc2"} and out["num__pc1"].dtype == np.float32
    np.testing.assert_allclose(out["num__pc1"], [0.6 * 0.5 + 0.8 * 0.25, 0.6 * -0.5 + 0.8 * 0.75], atol=1e-7)
    np.testing.assert_allclose(out["num__pc2"], [-0.8 * 0.5 + 0.6 * 0.25, 0.8 * 0.5 + 0.6 * 0.75], atol=1e-7)


def test_pca_input_columns_are_required_by_name():
    with pytest.raises(tf.TransformError, match=r"numeric feature 'y' \(PCA input num__y\) is not among"):
        tf.apply_transform({"x": pa.array([1.0])}, pca_doc())


def test_an_inconsistent_projection_is_refused_naming_the_field():
    doc = pca_doc()
    doc["pca"]["mean"] = [0.5]
    doc["pca"]["components"][1] = [0.1, 0.2, 0.3]
    doc["numeric"][1]["output"] = "num__other"
    doc["numeric"].append({"name": "pc3", "output": "num__pc3", "pca_component": 3})
    with pytest.raises(tf.TransformError) as err:
        tf.check_document(doc, "run/transform.json")
    message = str(err.value)
    assert "run/transform.json: pca.mean: 1 values for 2 inputs" in message
    assert "pca.components[1]: 3 weights for 2 inputs" in message
    assert "numeric[1] (pc2).output: 'num__other' != pca.outputs[1] 'num__pc2'" in message
    assert "numeric[2] (pc3).pca_component: 3, but pca has 2 components" in message


def test_a_component_without_a_projection_is_refused():
    doc = pca_doc()
    doc["pca"] = None
    with pytest.raises(
        tf.TransformError, match=r"numeric\[0\] \(pc1\)\.pca_component: 1, but the document has no pca"
    ):
        tf.check_document(doc)


def test_the_schema_checks_selection_scores():
    doc = pca_doc()
    doc["selection"]["variance_threshold"]["scores"][0]["p_value"] = 2.0
    del doc["pca"]["outputs"]
    with pytest.raises(tf.TransformError) as err:
        tf.check_document(doc)
    assert "selection.variance_threshold.scores[0].p_value: 2.0 is greater than the maximum of 1" in str(
        err.value
    )
    assert "'outputs' is a required property" in str(err.value)


# --------------------------------------------------------------------- categoricals


def test_vocab_ids_known_unseen_and_missing():
    spec = vocab("carrier", ["UA", "B6", "EV"])
    cleaned = tf.clean_categorical(pa.array(["UA", " B6 ", "EV", "", "  ", None, "ZZ", "ua", "\u00a0UA"]))
    ids = enc.encode_categorical(cleaned, spec)
    assert ids.dtype == np.int32
    # A no-break space is part of the value: "\u00a0UA" is a category of its own (unseen).
    assert ids.tolist() == [2, 3, 4, 0, 0, 0, 1, 1, 1]


def test_categoricals_are_trimmed_of_tab_line_feed_and_carriage_return():
    """As preprocess trims them: "\tUA\t" and "JFK\n" are "UA" and "JFK", not new categories."""
    padded = ["\tUA\t", "JFK\n", "\r\nB6 \t", "\x0bEV\x0c", " \t\r\n", "U\tA"]
    cleaned = tf.clean_categorical(pa.array(padded))
    assert cleaned.to_pylist() == ["UA", "JFK", "B6", "EV", None, "U\tA"]
    ids = enc.encode_categorical(cleaned, vocab("carrier", ["UA", "JFK", "B6", "EV"]))
    assert ids.tolist() == [2, 3, 4, 5, 0, 1]


def test_an_empty_vocabulary_maps_every_present_value_to_unseen():
    ids = enc.encode_categorical(tf.clean_categorical(pa.array(["a", None])), vocab("c", []))
    assert ids.tolist() == [1, 0]


def test_categorical_numbers_are_spelled_as_spark_spells_them():
    # Spark's CAST(1.0 AS STRING) is "1.0", not Arrow's "1": the vocabulary holds Spark's spelling.
    spec = vocab("c", ["1.0", "2", "true"])
    assert enc.encode_categorical(tf.clean_categorical(pa.array([1.0, 2.5])), spec).tolist() == [2, 1]
    assert enc.encode_categorical(tf.clean_categorical(pa.array([2, 3], pa.int32())), spec).tolist() == [3, 1]
    assert enc.encode_categorical(tf.clean_categorical(pa.array([True, False])), spec).tolist() == [4, 1]


HASH_VALUES = [
    "UA",
    "B6",
    "a",
    "Straße",
    "日本語",
    "😀 emoji",
    "é" * 3,
    "x" * 5000,
    "mixed ÄÖÜ ascii 123",
    "  padded  ",
]


def test_xxhash64_equals_spark(spark):
    from pyspark.sql import functions as F

    values = [*HASH_VALUES, "", None]
    rows = spark.createDataFrame([(v,) for v in values], "s string").select(F.xxhash64("s")).collect()
    assert enc.spark_xxhash64(values).tolist() == [r[0] for r in rows]


@pytest.mark.parametrize("buckets", [2, 16, 1024])
def test_hashed_categorical_ids_equal_sparks_pmod(spark, buckets):
    from pyspark.sql import functions as F

    values = [*HASH_VALUES, ""]
    df = spark.createDataFrame([(v,) for v in values], "s string")
    spark_ids = [
        r[0] for r in df.select((F.pmod(F.xxhash64("s"), F.lit(buckets - 1)) + 1).cast("int")).collect()
    ]
    ids = enc.encode_categorical(pa.array(values), hashed("s", buckets))
    # The empty string hashes in Spark too; the transform treats it as missing after cleaning.
    assert ids[:-1].tolist() == spark_ids[:-1]
    assert ids.min() >= 1 and ids.max() <= buckets - 1
    assert enc.encode_categorical(
        tf.clean_categorical(pa.array(["", None])), hashed("s", buckets)
    ).tolist() == [0, 0]


# ---------------------------------------------------------------------------- text


def test_text_vocab_ids_truncated_and_padded():
    spec = vocab("note", ["late", "storm", "gate"], role="text", max_tokens=3)
    cleaned = tf.clean_text(pa.array(["Late, STORM at gate 12!", "storm", "", None, "unknown late"]))
    ids = enc.encode_tokens(tf.tokenize(cleaned, spec["tokenizer"]), spec)
    assert ids.dtype == np.int32 and ids.shape == (5, 3)
    assert ids.tolist() == [[2, 3, 1], [3, 0, 0], [0, 0, 0], [0, 0, 0], [1, 2, 0]]


def test_text_hash_ids_equal_spark(spark):
    from pyspark.ml.feature import RegexTokenizer
    from pyspark.sql import functions as F

    texts = ["Boeing 737-824 TURBOFAN", "EMBRAER ERJ 190-100 IGW", "", None, "Airbus A320 " * 10]
    buckets, max_tokens = 64, 6
    df = spark.createDataFrame([(t,) for t in texts], "t string").withColumn("t", F.coalesce("t", F.lit("")))
    tokens = RegexTokenizer(inputCol="t", outputCol="tok", pattern=tf_pattern(), toLowercase=True).transform(
        df
    )
    ids = F.transform("tok", lambda t: (F.pmod(F.xxhash64(t), F.lit(buckets - 1)) + 1).cast("int"))
    padded = F.slice(F.concat(ids, F.array_repeat(F.lit(0), max_tokens)), 1, max_tokens)
    expected = [r[0] for r in tokens.select(padded).collect()]
    spec = hashed("t", buckets, role="text", max_tokens=max_tokens)
    out = enc.encode_tokens(tf.tokenize(tf.clean_text(pa.array(texts)), spec["tokenizer"]), spec)
    assert out.tolist() == expected


def tf_pattern() -> str:
    return r"[^\p{L}\p{N}]+"


def test_text_is_cut_to_preprocess_text_max_length_before_tokenizing():
    cleaned = tf.clean_text(pa.array(["abc defgh"]), max_length=5)
    assert cleaned.to_pylist() == ["abc d"]


TRICKY_TEXT = [
    "Hello, World!",
    "  leading and trailing  ",
    ",,,punctuation...runs;;;here!!!",
    "ÉCOLE Straße ΣΟΦΟΣ İstanbul",
    "a1b2 3c -- ,, ..",
    "",
    "𝐀𝐁 x 😀 y",
    "日本語テキスト 中文",
    "x_y-z tab\tnew\nline\r\nend",
    "ǅungla ﬁ ß ΌΣΟΣ Σ",
    "Ünïcödé\u00a0nbsp\u2028sep\u0085nel",
    "١٢٣ digits ½ ²",
]


@pytest.mark.parametrize(
    "pattern",
    [r"[^\p{L}\p{N}]+", r"\s+", r"\W+", r"[,.;!]+", r"\d+", r"[\s\p{Punct}]+", r"\P{Alpha}+", r"."],
)
@pytest.mark.parametrize(("lowercase", "min_length"), [(True, 1), (False, 2)])
def test_tokenizer_equals_spark_regex_tokenizer(spark, pattern, lowercase, min_length):
    from pyspark.ml.feature import RegexTokenizer

    texts = [*TRICKY_TEXT, None]
    df = spark.createDataFrame([(t or "",) for t in texts], "t string")
    tokenizer = RegexTokenizer(
        inputCol="t",
        outputCol="tok",
        pattern=pattern,
        gaps=True,
        toLowercase=lowercase,
        minTokenLength=min_length,
    )
    expected = [r[0] for r in tokenizer.transform(df).select("tok").collect()]
    ours = tf.Tokenizer(pattern, lowercase, min_length)
    assert [ours(t or "") for t in texts] == expected


def test_tokenizer_equals_spark_on_a_one_megabyte_string(spark):
    from pyspark.ml.feature import RegexTokenizer
    from pyspark.sql import functions as F

    # Built in Spark and in Python from the same recipe, so the 1 MB never crosses py4j
    # in the question, only in the answer (as a token count and a hash of the tokens).
    unit = "Wörd-42, ünïcode 😀 x_y "
    repeat = (1 << 20) // len(unit.encode()) + 1
    df = spark.range(1).select(F.repeat(F.lit(unit), repeat).alias("t"))
    tokens = RegexTokenizer(inputCol="t", outputCol="tok", pattern=tf_pattern(), minTokenLength=2).transform(
        df
    )
    row = tokens.select(F.size("tok"), F.xxhash64(F.concat_ws("|", "tok"))).collect()[0]
    ours = tf.Tokenizer(tf_pattern(), True, 2)(unit * repeat)
    assert len((unit * repeat).encode()) > 1 << 20
    assert (len(ours), int(enc.spark_xxhash64(["|".join(ours)])[0])) == (row[0], row[1])


def test_java_only_regex_meanings_are_translated():
    assert tf.java_regex(r"\w+").pattern == "[a-zA-Z_0-9]+"
    assert tf.java_regex(r"[\s,]").pattern == "[ \\t\\n\\x0B\\f\\r,]"
    with pytest.raises(tf.TransformError, match=r"\(\?i\) is ASCII-only in Java"):
        tf.java_regex("(?i)x")


# ------------------------------------------------------------------ casts, proven

CAST_INPUTS = [
    "1",
    "-1",
    "+1",
    " 1 ",
    "\t7\n",
    "1.0",
    "1.5",
    "1e3",
    "0x10",
    "１２",
    "٣",
    "1_000",
    "2147483647",
    "2147483648",
    "-2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "00012",
    "-0",
    "",
    "NaN",
    "nan",
    "-nan",
    "+nan",
    "-NaN",
    "+NaN",
    "Infinity",
    "-Infinity",
    "inf",
    "+inf",
    "INF",
    "1d",
    "1f",
    "1.5D",
    "0x1p3",
    ".5",
    "5.",
    "-.5e-3",
    "1e",
    "e5",
    "\u00a01",
    "\x7f1",
    "1\x7f",
    "true",
    "false",
    "t",
    "f",
    "yes",
    "no",
    "y",
    "n",
    "TRUE",
    " tRuE ",
    "on",
    "2013-01-01",
    "2013-1-1",
    "2013-01",
    "2013",
    "+2013-01-01",
    "-0001-01-01",
    "12345-01-01",
    "2013-02-29",
    "2012-02-29",
    "2013-13-01",
    "20130101",
    "2013-01-01abc",
    "2013-01-01 xyz",
    "2013-01-01T",
    "2013-01-1 x",
    "2013-01 x",
    "2013-01-01 05:06:07",
    "2013-01-01T05:06:07",
    "2013-01-01 05:06:07.123456789",
    "2013-01-01 05:06:07.",
    "2013-01-01T05:06:07Z",
    "2013-01-01 05:06:07+02:00",
    "2013-01-01 05:06:07 +0200",
    "2013-01-01 05:06",
    "2013-01-01 5",
    "2013-01-01T05",
    "2013-01-01 05:06:07 UTC",
    "2013-01-01 05:06:07 GMT+01:00",
    "2013-01-01 05:06:07 America/Los_Angeles",
    "2013-01-01 05:06:07CET",
    "2013-01-01 24:00:00",
    "2013-03-10 02:30:00",
    "2013-11-03 01:30:00",
    "2013-07-01 12:00:00",
    "2013-01-01 05:06:07 Not/AZone",
]


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_try_cast_of_strings_equals_spark(spark_zone, zone):
    from pyspark.sql import functions as F

    spark = spark_zone(zone)
    kinds = {"int": "int", "long": "bigint", "double": "double", "boolean": "boolean"}
    df = spark.createDataFrame([(v,) for v in CAST_INPUTS], "s string")
    selected = [F.col("s").try_cast(t).alias(k) for k, t in kinds.items()]
    # As day and microsecond numbers: Python's date cannot hold year -1 or 12345.
    selected.append(F.unix_date(F.col("s").try_cast("date")).alias("date"))
    selected.append(F.unix_micros(F.col("s").try_cast("timestamp")).alias("timestamp"))
    rows = df.select(*selected).collect()
    for kind in [*kinds, "date", "timestamp"]:
        ours = tf.spark_try_cast(pa.array(CAST_INPUTS), kind, zone=zone)
        if kind in ("date", "timestamp"):
            ours = ours.cast(pa.int32() if kind == "date" else pa.int64())
        theirs = [r[kind] for r in rows]
        mismatches = [
            (value, a, b)
            for value, a, b in zip(CAST_INPUTS, ours.to_pylist(), theirs, strict=True)
            if not (
                a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
            )
        ]
        assert mismatches == [], f"{kind}: (value, ours, Spark's)"


DOUBLES = [
    1.0,
    1.5,
    0.1,
    1e-3,
    1e-4,
    1e7,
    1e6,
    12345678.9,
    1e20,
    1e21,
    -0.0,
    0.0,
    -2.5,
    math.nan,
    math.inf,
    -math.inf,
    123456789012.0,
    0.30000000000000004,
    100.0,
    1234567.0,
    9999999.0,
    0.00099,
]


def test_double_to_string_equals_spark(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(d,) for d in DOUBLES], "d double")
    expected = [r[0] for r in df.select(F.col("d").cast("string")).collect()]
    assert tf.spark_string(pa.array(DOUBLES)).to_pylist() == expected


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_other_types_to_string_equal_spark(spark_zone, zone):
    import datetime as dt

    from pyspark.sql import functions as F

    spark = spark_zone(zone)
    micros = [0, 1_357_016_400_123_000, 1_362_900_600_000_000, 1_383_456_600_000_001, None]
    days = [0, 15706, -1, None, 1]
    df = spark.createDataFrame(
        [
            (m, d, b, i)
            for m, d, b, i in zip(
                micros, days, [True, False, None, True, False], [1, -7, None, 0, 2**31 - 1], strict=True
            )
        ],
        "m bigint, d int, b boolean, i int",
    )
    rows = df.select(
        F.timestamp_micros("m").cast("string"),
        F.date_from_unix_date("d").cast("string"),
        F.col("b").cast("string"),
        F.col("i").cast("string"),
    ).collect()
    assert tf.spark_string(
        pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")), zone=zone
    ).to_pylist() == [r[0] for r in rows]
    assert tf.spark_string(pa.array(days, pa.int32()).cast(pa.date32())).to_pylist() == [r[1] for r in rows]
    assert tf.spark_string(pa.array([True, False, None, True, False])).to_pylist() == [r[2] for r in rows]
    assert tf.spark_string(pa.array([1, -7, None, 0, 2**31 - 1], pa.int32())).to_pylist() == [
        r[3] for r in rows
    ]
    assert dt.date(1970, 1, 1).toordinal() == 719163


# ------------------------------------------------------------------ the whole doc


def test_apply_transform_gives_the_shard_columns():
    doc = make_doc()
    table = pa.table(
        {
            "flight_id": ["a", "b", "c"],
            "delayed": pa.array([1, 0, 1], pa.int32()),
            "distance": [1400.0, None, 5000.0],
            "seats": [160.0, math.nan, None],
            "carrier": ["UA", "EV", "XX"],
            "day_of_week": pa.array([7, 1, None], pa.int64()),
            "plane_model": ["BOEING 737", None, ""],
            "note": ["storm and late", "LATE", None],
        }
    )
    out = tf.apply_transform(table, doc)
    assert list(out) == [
        "id",
        "label",
        "num__distance",
        "num__seats",
        "cat__carrier",
        "cat__day_of_week",
        "txt__plane_model",
        "txt__note",
    ]
    assert out["id"].tolist() == ["a", "b", "c"] and out["label"].tolist() == [1, 0, 1]
    np.testing.assert_allclose(out["num__distance"], [1.25, 0.25, 2.75])
    np.testing.assert_allclose(out["num__seats"], [0.5, 140 / 300, 140 / 300], rtol=1e-6)
    assert out["cat__carrier"].tolist() == [2, 4, 1]
    assert out["cat__day_of_week"][2] == 0 and 1 <= out["cat__day_of_week"][0] <= 15
    assert out["txt__plane_model"].shape == (3, 4) and out["txt__plane_model"][1:].tolist() == [[0] * 4] * 2
    assert out["txt__note"].tolist() == [[3, 1, 2], [2, 0, 0], [0, 0, 0]]
    assert {k: v.dtype for k, v in out.items() if "__" in k} == {
        "num__distance": np.float32,
        "num__seats": np.float32,
        "cat__carrier": np.int32,
        "cat__day_of_week": np.int32,
        "txt__plane_model": np.int32,
        "txt__note": np.int32,
    }


def test_apply_transform_names_a_missing_feature_column():
    with pytest.raises(tf.TransformError, match="numeric feature 'seats' \\(num__seats\\) is not among"):
        tf.apply_transform(pa.table({"distance": [1.0]}), make_doc())


def test_apply_transform_gives_a_continuous_labels_value():
    """A regression's label is its value (float32, as the loader gives `target`), not a class id."""
    doc = make_doc()
    doc["label"] = {
        **doc["label"],
        "type": "continuous",
        "target": {"column": "target", "mean": 3.0, "std": 2.0},
    }
    table = pa.table(
        {
            "flight_id": ["a", "b"],
            "delayed": [12.5, -3.25],
            "distance": [1400.0, 5000.0],
            "seats": [160.0, 100.0],
            "carrier": ["UA", "EV"],
            "day_of_week": pa.array([7, 1], pa.int64()),
            "plane_model": ["BOEING 737", None],
            "note": ["late", None],
        }
    )
    out = tf.apply_transform(table, doc)
    assert out["label"].dtype == np.float32 and out["label"].tolist() == [12.5, -3.25]
    with pytest.raises(tf.TransformError, match=r"label column 'delayed' has missing values or values that"):
        tf.apply_transform(table.set_column(1, "delayed", pa.array([1.0, None])), doc)
