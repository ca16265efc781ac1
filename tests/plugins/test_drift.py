"""Drift metrics on synthetic `_stats.json` documents whose answer is known.

Numeric days are normal distributions described by their quantiles (as validate writes
them), so the decile-binned PSI can be compared with the one computed analytically
from the normal CDF.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics

import pytest

from lakeprep_airflow import drift
from lakeprep_contracts import documents, knobs
from tests.plugins.stats_data import (
    PROBABILITIES,
    categorical,
    categorical_of,
    constant,
    day,
    normal,
    numeric_of,
    text,
    uniform,
)


def binned_normal_psi(shift: float, bins: int = 10) -> float:
    """PSI of N(shift, 1) against N(0, 1) on N(0, 1)'s deciles, from the normal CDF."""
    reference = statistics.NormalDist()
    edges = [-math.inf, *(reference.inv_cdf(k / bins) for k in range(1, bins)), math.inf]
    shares = [
        reference.cdf(hi - shift) - reference.cdf(lo - shift)
        for lo, hi in zip(edges, edges[1:], strict=False)
    ]
    return sum((a - 1 / bins) * math.log(a * bins) for a in shares)


# ------------------------------------------------------------------------------ numeric


def test_identical_numeric_distributions_have_zero_psi():
    value = drift.numeric_psi(drift.numeric_day(normal()), [drift.numeric_day(normal())] * 3)
    assert value == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("shift", [0.2, 0.5, 1.0])
def test_psi_of_a_shifted_normal_matches_the_analytic_binned_psi(shift):
    value = drift.numeric_psi(drift.numeric_day(normal(shift)), [drift.numeric_day(normal())])
    assert value == pytest.approx(binned_normal_psi(shift), rel=0.1)


def test_a_one_sigma_shift_drifts_and_a_small_one_does_not():
    report = drift.drift_report(
        day("2013-01-03", distance=normal(1.0), dep_delay=normal(0.05)),
        [
            day("2013-01-01", distance=normal(), dep_delay=normal()),
            day("2013-01-02", distance=normal(), dep_delay=normal()),
        ],
    )
    distance, dep_delay = report["features"]["distance"], report["features"]["dep_delay"]
    assert distance["metric"] == "psi" and distance["value"] > 0.25 and distance["status"] == "drift"
    assert dep_delay["value"] < 0.01 and dep_delay["status"] == "ok"
    assert distance["reference_days"] == 2
    assert report["drifting"] == ["distance"] and report["status"] == "drift"


def test_pooled_quantiles_are_those_of_the_count_weighted_mixture():
    low, high = drift.numeric_day(uniform(0, 1)), drift.numeric_day(uniform(1, 2))
    assert drift.pooled_quantiles([low, high], [0.25, 0.5, 0.75]) == pytest.approx([0.5, 1.0, 1.5])
    three_to_one = drift.numeric_day(uniform(0, 1, count=3000))
    assert drift.pooled_quantiles([three_to_one, high], [0.375, 0.75, 0.875]) == pytest.approx(
        [0.5, 1.0, 1.5]
    )


def test_the_reference_weighs_each_day_by_its_count():
    current = drift.numeric_day(normal())
    mostly_like_current = [drift.numeric_day(normal(count=9000)), drift.numeric_day(normal(3.0, count=1000))]
    mostly_unlike = [drift.numeric_day(normal(count=1000)), drift.numeric_day(normal(3.0, count=9000))]
    near, far = drift.numeric_psi(current, mostly_like_current), drift.numeric_psi(current, mostly_unlike)
    assert 0 < near < 0.25 < far


def test_a_point_mass_is_one_bin_and_moving_it_drifts():
    same = drift.numeric_psi(drift.numeric_day(constant(5.0)), [drift.numeric_day(constant(5.0))])
    moved = drift.numeric_psi(drift.numeric_day(constant(6.0)), [drift.numeric_day(constant(5.0))])
    assert same == pytest.approx(0.0, abs=1e-12)
    assert moved > 5  # all mass moved from bin (-inf, 5] to (5, inf): 2 * (1 - eps) * ln(1 / eps)


def test_a_rise_in_nulls_is_drift_of_a_numeric():
    current = day("2013-01-02", distance=normal(count=700, nulls=300))
    report = drift.drift_report(current, [day("2013-01-01", distance=normal())])
    assert report["features"]["distance"]["status"] == "drift"
    assert report["features"]["distance"]["value"] > 1.0


def test_nan_counts_as_missing():
    with_nan = normal(count=1000)
    with_nan["nan"] = 400
    assert drift.numeric_day(with_nan).missing == 400
    value = drift.numeric_psi(drift.numeric_day(with_nan), [drift.numeric_day(normal())])
    assert value > 1.0


def test_a_column_without_values_is_all_missing():
    empty = normal(count=0, nulls=500)
    empty["quantiles"]["values"] = [None] * len(PROBABILITIES)
    empty.update(min=None, max=None, mean=None, stddev=None)
    assert documents.problems("stats", day("2013-01-02", distance=empty)) == []
    value = drift.numeric_psi(drift.numeric_day(empty), [drift.numeric_day(normal())])
    assert value > 5
    # All-null on both sides is no change.
    assert drift.numeric_psi(drift.numeric_day(empty), [drift.numeric_day(empty)]) == 0.0


def test_bins_from_params_change_the_binning():
    current, reference = day("2", distance=normal(0.5)), [day("1", distance=normal())]
    deciles = drift.drift_report(current, reference)["features"]["distance"]["value"]
    twenty = drift.drift_report(current, reference, {"bins": 20})["features"]["distance"]["value"]
    assert deciles == pytest.approx(binned_normal_psi(0.5), rel=0.1)
    assert twenty == pytest.approx(binned_normal_psi(0.5, bins=20), rel=0.1)
    assert twenty > deciles


def test_malformed_quantiles_name_the_column():
    broken = normal()
    broken["quantiles"]["values"] = list(reversed(broken["quantiles"]["values"]))
    with pytest.raises(ValueError, match=r"columns\.distance\.quantiles\.values: .* must be non-decreasing"):
        drift.drift_report(day("2", distance=broken), [day("1", distance=normal())])


# -------------------------------------------------------------------- categorical, text


def test_identical_categoricals_have_zero_jsd():
    counts = {"UA": 160, "AA": 90, "DL": 50}
    value = drift.category_jsd(
        drift.category_day(categorical(counts)), [drift.category_day(categorical(counts))]
    )
    assert value == 0.0


def test_disjoint_categoricals_have_jsd_one():
    current = drift.category_day(categorical({"UA": 50, "AA": 50}))
    value = drift.category_jsd(current, [drift.category_day(categorical({"DL": 100}))])
    assert value == pytest.approx(1.0, abs=1e-12)


def test_jsd_is_a_distance_between_zero_and_one():
    a = drift.category_day(categorical({"UA": 80, "AA": 20}))
    b = drift.category_day(categorical({"UA": 20, "AA": 80}))
    value = drift.category_jsd(a, [b])
    # JS divergence of (0.8, 0.2) and (0.2, 0.8): H(0.5) - H(0.8) in bits; the distance is its root.
    entropy = -(0.8 * math.log2(0.8) + 0.2 * math.log2(0.2))
    assert value == pytest.approx(math.sqrt(1 - entropy))


def test_a_value_that_crossed_the_top_k_cut_is_not_drift():
    # B is in today's top but fell into "other" on the reference day: its reference share
    # is unknown, so it is compared as part of "other" on both sides.
    current = drift.category_day(categorical({"A": 60, "B": 30}, other=10))
    reference = drift.category_day(categorical({"A": 60}, other=40))
    assert drift.category_jsd(current, [reference]) == 0.0


def test_a_rise_in_nulls_is_drift_of_a_categorical():
    report = drift.drift_report(
        day("2", carrier=categorical({"UA": 50, "AA": 50}, nulls=100)),
        [day("1", carrier=categorical({"UA": 100, "AA": 100}))],
    )
    carrier = report["features"]["carrier"]
    assert carrier["metric"] == "jsd" and carrier["status"] == "drift" and carrier["value"] > 0.3


def test_text_compares_token_distributions_and_null_rows():
    same = drift.drift_report(
        day("2", model=text({"boeing": 300, "airbus": 100})),
        [day("1", model=text({"boeing": 600, "airbus": 200}, rows=200))],
    )
    model = same["features"]["model"]
    assert (model["kind"], model["metric"], model["value"], model["status"]) == ("text", "jsd", 0.0, "ok")
    assert (model["rows"], model["reference_rows"], model["shift"]["value"]) == (100, 200, 0.0)
    shifted = drift.drift_report(
        day("2", model=text({"boeing": 100, "embraer": 300}, nulls=50)),
        [day("1", model=text({"boeing": 300, "airbus": 100}))],
    )
    assert shifted["features"]["model"]["status"] == "drift"


# ---------------------------------------------------------------------------- the report


def test_no_reference_days_is_recorded_never_an_error():
    current = day("2013-01-01", distance=normal(), carrier=categorical({"UA": 1}))
    report = drift.check_drift(current, [], {"action": "stop"})
    for feature in report["features"].values():
        assert feature["status"] == "no_reference"
        assert feature["value"] is None and feature["reference_days"] == 0
    assert report["status"] == "no_reference" and report["drifting"] == []
    assert documents.problems("drift", report) == []


def test_fewer_days_than_min_reference_days_records_the_value_without_judging():
    report = drift.check_drift(
        day("3", distance=normal(2.0)),
        [day("2", distance=normal())],
        {"min_reference_days": 2, "action": "stop"},
    )
    distance = report["features"]["distance"]
    assert distance["status"] == "no_reference" and distance["value"] > 0.25
    assert distance["note"] == "1 earlier day(s) have this column; min_reference_days is 2"


def test_a_reference_day_of_another_kind_does_not_count():
    report = drift.drift_report(
        day("3", distance=normal()),
        [day("1", distance=categorical({"x": 5})), day("2", distance=normal())],
    )
    assert report["features"]["distance"]["reference_days"] == 1
    assert report["reference_partitions"] == [
        "file:///lake/validate/flights/dt=1",
        "file:///lake/validate/flights/dt=2",
    ]


def test_values_under_the_threshold_are_recorded():
    report = drift.drift_report(day("2", distance=normal(0.1)), [day("1", distance=normal())])
    assert 0 < report["features"]["distance"]["value"] < 0.25
    assert report["features"]["distance"]["status"] == "ok" and report["status"] == "ok"


def test_stop_raises_naming_every_drifting_feature():
    current = day("3", distance=normal(1.0), carrier=categorical({"DL": 100}), air_time=normal())
    reference = [day("2", distance=normal(), carrier=categorical({"UA": 100}), air_time=normal())]
    with pytest.raises(drift.DriftError) as err:
        drift.check_drift(current, reference, {"action": "stop", "psi_threshold": 0.3})
    message = str(err.value)
    psi = err.value.report["features"]["distance"]["value"]
    assert f"distance psi={psi:.3f} > threshold 0.3; distance mean shift +1.000 sd > threshold 0.2" in message
    carrier = err.value.report["features"]["carrier"]
    assert f"carrier jsd=1.000 > threshold {carrier['threshold']:.3g}" in message
    assert "carrier share of 'DL' h=+3.142 > threshold" in message
    assert "air_time" not in message
    assert err.value.features == ["distance", "carrier"]
    assert message.startswith("drift in 2 feature(s) of file:///lake/validate/flights/dt=3 against 1 earlier")


def test_warn_returns_the_drift_without_raising():
    report = drift.check_drift(day("2", distance=normal(1.0)), [day("1", distance=normal())])
    assert report["status"] == "drift" and report["params"]["action"] == "warn"


def test_columns_select_and_order_the_features():
    current = day("2", distance=normal(), carrier=categorical({"UA": 1}), plane=text({"a": 1}))
    report = drift.drift_report(current, [], columns=["plane", "distance"])
    assert list(report["features"]) == ["plane", "distance"]
    with pytest.raises(KeyError, match=r"no statistics for column\(s\) \['tailnum'\]"):
        drift.drift_report(current, [], columns=["tailnum"])


def test_merge_keeps_validates_view_and_adds_preprocess_columns():
    validate = day("2", distance=normal())
    preprocess = day("2", distance=normal(5.0), temp=normal(20.0))
    preprocess["partition"] = "file:///lake/preprocess/flights/dt=2"
    merged = drift.merge_stats([validate, preprocess])
    assert merged["partition"] == validate["partition"]
    assert merged["columns"]["distance"] is validate["columns"]["distance"]
    assert list(merged["columns"]) == ["distance", "temp"]


def test_params_are_checked():
    with pytest.raises(TypeError, match=r"unknown drift parameter\(s\) \['psi'\]"):
        drift.drift_report(day("1"), [], {"psi": 0.2})
    with pytest.raises(ValueError, match=r"action 'halt' must be one of \"warn\", \"stop\""):
        drift.DriftParams.from_mapping({"action": "halt"})
    with pytest.raises(ValueError, match=r"jsd_threshold 1.5 must be > 0 and <= 1"):
        drift.DriftParams.from_mapping({"jsd_threshold": 1.5})
    # The declaration's bound (the spec's too): at most 100 bins, where the job once said 1000.
    with pytest.raises(ValueError, match=r"bins 500 must be >= 2 and <= 100"):
        drift.DriftParams.from_mapping({"bins": 500})
    assert dataclasses.asdict(drift.DriftParams.from_mapping({})) == knobs.defaults("check_drift")


def test_describe_is_the_log_line():
    feature = {"metric": "psi", "value": 0.0312, "threshold": 0.25, "status": "ok", "reference_days": 3}
    assert drift.describe("distance", feature) == "distance psi=0.031 (threshold 0.25) ok"
    none = {**feature, "value": None, "status": "no_reference", "reference_days": 0}
    assert (
        drift.describe("distance", none)
        == "distance psi=n/a (threshold 0.25) no_reference (0 reference day(s))"
    )


# --------------------------------------------------------------------------- the schemas


def test_reports_match_the_drift_schema():
    current = day("3", distance=normal(1.0), carrier=categorical({"UA": 5}), model=text({"a": 3}))
    reference = [day("2", distance=normal(), carrier=categorical({"UA": 5}), model=text({"b": 3}))]
    report = drift.drift_report(current, reference)
    assert documents.problems("drift", report) == []
    report["features"]["carrier"]["metric"] = "psi"
    report["features"]["distance"]["status"] = "late"
    assert documents.problems("drift", report) == [
        "features.carrier.metric: 'jsd' was expected",
        "features.distance.status: 'late' is not one of "
        "['ok', 'drift', 'no_reference', 'too_few_rows', 'ignored']",
    ]


def test_synthetic_stats_match_the_stats_schema():
    doc = day("2013-01-02", distance=normal(), carrier=categorical({"UA": 3}, other=2), model=text({"a": 4}))
    assert documents.problems("stats", doc) == []


def test_the_stats_schema_names_what_is_wrong():
    broken = day("2013-01-02", distance=normal(), carrier=categorical({"UA": 3}))
    del broken["columns"]["distance"]["quantiles"]
    broken["columns"]["carrier"]["count"] = 2.5
    broken["columns"]["carrier"]["kind"] = "categorical"
    broken["columns"]["extra"] = {"kind": "timestamp"}
    assert documents.problems("stats", broken) == [
        "columns.carrier.count: 2.5 is not of type 'integer'",
        "columns.distance: 'quantiles' is a required property",
        "columns.extra.kind: 'timestamp' is not one of ['numeric', 'categorical', 'text']",
    ]


# ------------------------------------------------- noise: generated days, known answers
# Days of generated rows, summarized as validate summarizes them (stats_data.*_of): a
# small dataset (140 rows a day, a categorical of 87 values: the field trial's
# `neighborhood`) and a normal one (1000 rows a day), seven earlier days each.

NEIGHBORHOODS = [f"n{i:02d}" for i in range(87)]
CARRIERS = [f"c{i:02d}" for i in range(15)]


def zipf(k: int, s: float = 1.0) -> list[float]:
    weights = [1 / (i + 1) ** s for i in range(k)]
    return [w / sum(weights) for w in weights]


def doubled(shares: list[float], i: int) -> list[float]:
    """`shares` with value i's share doubled and the others scaled down to make room."""
    rest = (1 - 2 * shares[i]) / (1 - shares[i])
    return [2 * x if j == i else x * rest for j, x in enumerate(shares)]


def generated_day(rng: random.Random, ds: str, rows: int, *, mean: float = 0.0, carriers=None) -> dict:
    return day(
        ds,
        neighborhood=categorical_of(rng.choices(NEIGHBORHOODS, zipf(87), k=rows)),
        carrier=categorical_of(rng.choices(CARRIERS, carriers or zipf(15, 1.2), k=rows)),
        x=numeric_of([rng.gauss(mean, 1.0) for _ in range(rows)]),
        skewed=numeric_of([rng.lognormvariate(mean, 1.0) for _ in range(rows)]),
        hour=numeric_of([float(rng.randint(5, 23)) for _ in range(rows)]),
    )


def window(rng: random.Random, rows: int, days: int = 7) -> list[dict]:
    return [generated_day(rng, f"2013-01-{d + 1:02d}", rows) for d in range(days)]


@pytest.mark.parametrize("rows", [140, 1000])
def test_on_one_distribution_at_most_five_percent_of_features_drift(rows):
    rng = random.Random(rows)
    flagged, judged, neighborhood = 0, 0, 0
    for _ in range(30):
        report = drift.drift_report(generated_day(rng, "2013-01-08", rows), window(rng, rows))
        judged += sum(f["status"] in ("ok", "drift") for f in report["features"].values())
        flagged += len(report["drifting"])
        neighborhood += "neighborhood" in report["drifting"]
    assert judged == 30 * 5
    assert flagged / judged <= 0.05, f"{flagged} of {judged} unchanged features drift"
    assert neighborhood <= 2  # a fixed JSD threshold of 0.1 flags all 30 at 140 rows


@pytest.mark.parametrize(
    ("rows", "carriers", "value"),
    [
        # At 140 rows a value needs a visible share: 20 % (28 rows) doubled to 40 %. A 5 %
        # share doubled there is 7 rows against 14, within what a day draws by chance.
        (140, [0.2, *[0.8 / 14] * 14], 0),
        (1000, zipf(15, 1.2), 2),  # 10 % doubled to 20 %
    ],
    ids=["small", "normal"],
)
def test_a_real_shift_is_caught_at_a_days_size(rows, carriers, value):
    rng = random.Random(rows)
    caught = {"x": 0, "carrier": 0}
    for _ in range(20):
        reference = [
            day(f"2013-01-{d + 1:02d}", carrier=categorical_of(rng.choices(CARRIERS, carriers, k=rows)), x=x)
            for d, x in enumerate(numeric_of([rng.gauss(0, 1) for _ in range(rows)]) for _ in range(7))
        ]
        current = day(
            "2013-01-08",
            carrier=categorical_of(rng.choices(CARRIERS, doubled(carriers, value), k=rows)),
            x=numeric_of([rng.gauss(0.5, 1) for _ in range(rows)]),  # half a standard deviation
        )
        report = drift.drift_report(current, reference)
        for name in caught:
            caught[name] += report["features"][name]["status"] == "drift"
    assert caught == {"x": 20, "carrier": caught["carrier"]} and caught["carrier"] >= 18


def test_the_same_statistics_give_the_same_report_byte_for_byte():
    rng = random.Random(3)
    current, reference = generated_day(rng, "2013-01-08", 140), window(rng, 140)
    first = json.dumps(drift.drift_report(current, reference), allow_nan=False)
    again = json.dumps(drift.drift_report(json.loads(json.dumps(current)), json.loads(json.dumps(reference))))
    assert first == again
    neighborhood = drift.drift_report(current, reference)["features"]["neighborhood"]
    # The permutation null at 140 rows reaches past the fixed threshold of 0.1.
    assert 0 < neighborhood["noise"] < neighborhood["noise_bound"] == neighborhood["threshold"]
    assert neighborhood["noise_bound"] > 0.1 and neighborhood["other_left_out"]["day"] > 0


def test_a_day_with_fewer_rows_than_min_rows_is_recorded_not_judged():
    report = drift.check_drift(
        day("2", distance=normal(3.0, count=20)),
        [day("1", distance=normal(count=1000))],
        {"action": "stop"},
    )
    distance = report["features"]["distance"]
    assert distance["status"] == "too_few_rows" and distance["value"] > distance["threshold"]
    assert distance["note"] == "20 row(s) on the day and 1000 in the earlier days; min_rows is 30"
    assert report["status"] == "no_reference" and report["drifting"] == []
    assert documents.problems("drift", report) == []
    judged = drift.drift_report(
        day("2", distance=normal(3.0, count=20)), [day("1", distance=normal())], {"min_rows": 20}
    )
    assert judged["features"]["distance"]["status"] == "drift"


def test_an_ignored_feature_is_recorded_with_its_noise_never_drift():
    report = drift.check_drift(
        day("2", day_of_week=categorical({"3": 900}), distance=normal()),
        [day("1", day_of_week=categorical({"2": 900}), distance=normal())],
        {"action": "stop"},
        ignore=["day_of_week"],
    )
    weekday = report["features"]["day_of_week"]
    assert weekday["status"] == "ignored" and weekday["value"] == pytest.approx(1.0)
    assert weekday["noise"] is not None and report["drifting"] == [] and report["status"] == "ok"
