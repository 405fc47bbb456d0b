"""Bins and scoring rules: exact values and properties that must hold for any forecast."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from search_engine import scoring
from search_engine.bins import DEFAULT_BINS, BinTable

probs8 = st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=8, max_size=8).filter(
    lambda p: sum(p) > 1e-6).map(lambda p: [x / sum(p) for x in p])
true_bins = st.integers(min_value=1, max_value=8)


def onehot(b, k=8):
    return [1.0 if i == b - 1 else 0.0 for i in range(k)]


@pytest.mark.parametrize("speedup, expected", [
    (0.1, 1), (0.25, 2), (0.49, 2), (0.5, 3), (0.706, 3), (0.707, 4), (0.999, 4), (1.0, 5),
    (1.413, 5), (1.414, 6), (1.99, 6), (2.0, 7), (3.99, 7), (4.0, 8), (100.0, 8),
])
def test_speedups_fall_in_the_published_bins(speedup, expected):
    assert DEFAULT_BINS.bin_of(speedup) == expected


def test_the_bin_table_has_eight_named_bins_and_rejects_bad_speedups():
    assert DEFAULT_BINS.n_bins == 8
    assert DEFAULT_BINS.names[0] == "severe slowdown" and DEFAULT_BINS.names[-1] == "extreme speedup"
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            DEFAULT_BINS.bin_of(bad)


def test_edges_are_configurable_in_one_table():
    table = BinTable(edges=(0.5, 1.0, 2.0))
    assert table.n_bins == 4
    assert [table.bin_of(s) for s in (0.4, 0.5, 1.5, 3.0)] == [1, 2, 3, 4]
    assert BinTable.from_dict(table.to_dict()) == table
    with pytest.raises(ValueError):
        BinTable(edges=(1.0, 0.5))


@given(st.floats(min_value=1e-3, max_value=1e3))
def test_a_representative_speedup_lies_in_its_bin(speedup):
    b = DEFAULT_BINS.bin_of(speedup)
    assert DEFAULT_BINS.bin_of(DEFAULT_BINS.representative(b)) == b


def test_the_brier_score_of_a_uniform_forecast_is_exact():
    # 1/2 (7 (1/8)^2 + (7/8)^2) = 1/2 (7/64 + 49/64) = 7/16 for every true bin.
    expected = float(Fraction(1, 2) * (Fraction(7, 64) + Fraction(7, 8) ** 2))
    assert expected == 7 / 16
    for b in range(1, 9):
        assert scoring.brier([1 / 8] * 8, b) == pytest.approx(expected, abs=1e-15)


def test_the_crps_of_a_uniform_forecast_is_exact():
    # F(k) = k/8; true bin t: (1/7) [sum_{k<t} (k/8)^2 + sum_{k>=t, k<=7} (k/8 - 1)^2]
    for t in range(1, 9):
        exact = Fraction(0)
        for k in range(1, 8):
            exact += (Fraction(k, 8) - (1 if k >= t else 0)) ** 2
        assert scoring.crps([1 / 8] * 8, t) == pytest.approx(float(exact / 7), abs=1e-12)


@given(probs8, true_bins)
def test_crps_is_zero_only_for_a_one_hot_on_the_true_bin(p, t):
    value = scoring.crps(p, t)
    assert 0 <= value <= 1 + 1e-12
    if value < 1e-12:
        assert p[t - 1] == pytest.approx(1.0, abs=1e-6)
    assert scoring.crps(onehot(t), t) == 0.0


@given(probs8, true_bins)
def test_brier_is_within_zero_and_one_and_zero_only_when_certain_and_right(p, t):
    value = scoring.brier(p, t)
    assert 0 <= value <= 1 + 1e-12
    if value < 1e-12:
        assert p[t - 1] == pytest.approx(1.0, abs=1e-6)


@given(true_bins, true_bins)
def test_a_one_hot_further_away_is_worse_under_crps_but_not_under_brier(t, wrong):
    assume(wrong != t)
    further = min(8, wrong + 1) if wrong > t else max(1, wrong - 1)
    assume(further != wrong)
    assert scoring.crps(onehot(further), t) > scoring.crps(onehot(wrong), t)
    assert scoring.brier(onehot(further), t) == scoring.brier(onehot(wrong), t) == 1.0


def test_a_one_hot_three_bins_off_has_a_crps_of_three_sevenths():
    assert scoring.crps(onehot(5), 2) == pytest.approx(3 / 7)


@given(probs8, true_bins)
def test_nll_matches_the_true_bins_probability(p, t):
    assume(p[t - 1] > 1e-9)
    assert scoring.nll(p, t) == pytest.approx(-math.log(p[t - 1]))


@given(probs8)
def test_confidences_are_within_zero_and_one(p):
    for kind in ("max", "entropy", "margin"):
        assert -1e-12 <= scoring.confidence(p, kind) <= 1 + 1e-12


def test_confidence_kinds_agree_on_extremes():
    assert scoring.confidence(onehot(3), "max") == 1.0
    assert scoring.confidence(onehot(3), "entropy") == 1.0
    assert scoring.confidence(onehot(3), "margin") == 1.0
    assert scoring.confidence([1 / 8] * 8, "max") == 1 / 8
    assert scoring.confidence([1 / 8] * 8, "entropy") == pytest.approx(0.0, abs=1e-12)
    assert scoring.confidence([1 / 8] * 8, "margin") == 0.0
    assert scoring.confidence([0.5, 0.3, 0.2, 0, 0, 0, 0, 0], "margin") == pytest.approx(0.2)


def test_ece_is_zero_for_calibrated_buckets_and_the_gap_otherwise():
    conf = [0.8] * 10
    assert scoring.ece(conf, [True] * 8 + [False] * 2) == pytest.approx(0.0)
    assert scoring.ece(conf, [True] * 10) == pytest.approx(0.2)
    # Two buckets: 0.35 bucket all wrong (gap .35), 0.95 bucket all right (gap .05), equal weights.
    assert scoring.ece([0.35, 0.35, 0.95, 0.95], [False, False, True, True]) == pytest.approx(0.2)
    assert scoring.ece([0.0], [False]) == 0.0


def test_the_risk_coverage_curve_orders_by_confidence():
    coverage, risk = scoring.risk_coverage([0.9, 0.1, 0.5, 0.7], [0, 1, 1, 0])
    assert list(coverage) == [0.25, 0.5, 0.75, 1.0]
    assert list(risk) == pytest.approx([0, 0, 1 / 3, 0.5])
    assert scoring.aurc([0.9, 0.1, 0.5, 0.7], [0, 1, 1, 0]) == pytest.approx((0 + 0 + 1 / 3 + 0.5) / 4)
    assert scoring.risk_at_coverage([0.9, 0.1, 0.5, 0.7], [0, 1, 1, 0], 0.5) == 0.0
    assert scoring.risk_at_coverage([0.9, 0.1, 0.5, 0.7], [0, 1, 1, 0], 0.6) == pytest.approx(1 / 3)


@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=40), st.randoms())
def test_aurc_does_not_depend_on_the_input_order(pairs, rnd):
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    a = scoring.aurc([c for c, _ in pairs], [float(l) for _, l in pairs])
    b = scoring.aurc([c for c, _ in shuffled], [float(l) for _, l in shuffled])
    assert a == pytest.approx(b)


@given(st.lists(st.floats(0, 1), min_size=2, max_size=30))
def test_a_confidence_that_ranks_errors_last_has_the_lowest_aurc(losses_raw):
    losses = [1.0 if x > 0.5 else 0.0 for x in losses_raw]
    oracle = [1.0 - l for l in losses]
    inverse = [l for l in losses]
    assert scoring.aurc(oracle, losses) <= scoring.aurc(inverse, losses) + 1e-12


def test_recovered_speedup_at_top_k():
    speedups = [1.0, 3.0, 2.0, 0.5]
    assert scoring.recovered_speedup_at_top([0.1, 0.9, 0.5, 0.0], speedups, 0.25) == 1.0
    assert scoring.recovered_speedup_at_top([0.9, 0.1, 0.5, 0.0], speedups, 0.25) == pytest.approx(1 / 3)
    assert scoring.recovered_speedup_at_top([0.9, 0.1, 0.5, 0.0], speedups, 0.5) == pytest.approx(2 / 3)
    assert scoring.recovered_speedup_at_top([0.9, 0.1, 0.5, 0.0], speedups, 1.0) == 1.0


def test_ties_in_a_ranking_do_not_profit_from_the_input_order():
    speedups = np.array([5.0] + [1.0] * 99)
    scores = np.zeros(100)  # a ranking that knows nothing
    hits = [scoring.recovered_speedup_at_top(scores, speedups, 0.01, seed=s) for s in range(50)]
    assert 0 < np.mean([h == 1.0 for h in hits]) < 0.2


@given(probs8, true_bins)
def test_rewards_add_correctness_to_one_minus_the_score(p, t):
    predicted = int(np.argmax(p)) + 1
    correct = 1.0 if predicted == t else 0.0
    assert scoring.reward("correctness", p, predicted, t) == correct
    assert scoring.reward("brier", p, predicted, t) == pytest.approx(correct + 1 - scoring.brier(p, t))
    assert scoring.reward("crps", p, predicted, t) == pytest.approx(correct + 1 - scoring.crps(p, t))


@pytest.mark.parametrize("kind", ["correctness", "brier", "crps"])
@pytest.mark.parametrize("predicted", [None, 0, 9, "3", 2.5])
def test_an_answer_without_a_valid_bin_scores_zero(kind, predicted):
    assert scoring.reward(kind, [1 / 8] * 8, predicted, 3) == 0.0


@pytest.mark.parametrize("kind", ["brier", "crps"])
@pytest.mark.parametrize("probabilities", [
    None, [0.5] * 8, [0.2, 0.8], [float("nan")] + [1 / 7] * 7, [-0.1, 1.1] + [0] * 6, "garbled",
])
def test_an_answer_without_valid_probabilities_scores_zero(kind, probabilities):
    assert scoring.reward(kind, probabilities, 3, 3) == 0.0


def test_a_perfect_answer_earns_the_most():
    assert scoring.reward("brier", onehot(4), 4, 4) == 2.0
    assert scoring.reward("crps", onehot(4), 4, 4) == 2.0
    assert scoring.reward_correctness(4, 4) == 1.0
    assert scoring.reward_brier(onehot(4), 4, 4) == 2.0
    assert scoring.reward_crps(onehot(4), 4, 4) == 2.0


@settings(max_examples=50)
@given(probs8, true_bins)
def test_the_predicted_bin_is_the_argmax(p, t):
    assert scoring.predicted_bin(p) == int(np.argmax(p)) + 1
