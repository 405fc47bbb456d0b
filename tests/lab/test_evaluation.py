"""Evaluation reports, recalibration and discovery detection on forecasts whose answers are known."""
from __future__ import annotations

import math

import numpy as np
import pytest

from search_engine import scoring
from search_engine.lab import recalibration
from search_engine.lab.datasets import neighbour_pairs
from search_engine.lab.discovery import discovery_report
from search_engine.lab.evaluation import evaluate, format_table
from search_engine.lab.reports import ReportNotFound, list_reports, load_report, save_report
from search_engine.surrogates.base import Forecast
from tests.lab.helpers import synthetic_rows


def _onehot(b: int, mass: float = 1.0) -> Forecast:
    probabilities = [(1 - mass) / 7] * 8
    probabilities[b - 1] = mass
    return Forecast.from_probabilities(probabilities, surrogate="test")


def test_a_perfect_surrogate_scores_perfectly_and_recovers_the_best_kernel():
    rows = synthetic_rows({"a": [0.3, 0.8, 1.2, 3.0, 6.0], "b": [0.9, 1.5, 2.5]})
    ev = evaluate([_onehot(r["true_bin"]) for r in rows], rows)
    m = ev["metrics"]
    assert m["exact_accuracy"] == 1.0 and m["within_one_accuracy"] == 1.0
    assert m["brier"] == pytest.approx(0.0) and m["crps"] == pytest.approx(0.0) and m["ece"] == pytest.approx(0.0)
    assert m["aurc"] == 0.0
    assert all(v == 1.0 for v in ev["recovered_speedup"]["surrogate"].values())
    # a random ranking of 5 and 3 candidates misses the best at the top 10% most of the time
    assert ev["recovered_speedup"]["random"]["0.1"] < 0.8
    assert np.trace(np.array(ev["confusion"])) == len(rows)


def test_scores_match_the_scoring_rules_and_one_bin_off_counts_within_one():
    rows = synthetic_rows({"a": [1.2, 1.2, 0.8, 3.0]})  # bins 5, 5, 4, 7
    forecasts = [_onehot(5, 0.6), _onehot(4, 0.6), _onehot(4, 0.9), _onehot(4, 0.5)]
    ev = evaluate(forecasts, rows)
    m = ev["metrics"]
    assert m["exact_accuracy"] == 0.5
    assert m["within_one_accuracy"] == 0.75
    expected_brier = np.mean([scoring.brier(f.probabilities, r["true_bin"]) for f, r in zip(forecasts, rows)])
    assert m["brier"] == pytest.approx(expected_brier)
    assert m["nll"] == pytest.approx(np.mean([scoring.nll(f.probabilities, r["true_bin"]) for f, r in zip(forecasts, rows)]))
    assert ev["confusion"][6][3] == 1  # true bin 7 forecast as 4
    assert ev["true_bin_counts"][4] == 2


def test_abstentions_are_counted_and_left_out_of_the_probability_scores():
    rows = synthetic_rows({"a": [1.2, 0.8, 3.0]})
    forecasts = [_onehot(5), Forecast.abstention("The endpoint timed out. Retry later.", surrogate="llm"),
                 _onehot(7)]
    ev = evaluate(forecasts, rows)
    assert (ev["rows"], ev["answered"], ev["abstained"]) == (3, 2, 1)
    assert ev["metrics"]["exact_accuracy"] == 1.0
    assert ev["abstain_reasons"] == {"The endpoint timed out.": 1}
    table = format_table([("as forecast", ev)])
    assert "3 (2)" in table and "exact accuracy" in table


def _overconfident(n: int, seed: int) -> tuple[list[Forecast], list[int]]:
    """Forecasts that put 0.9 on a bin that is right only about 40% of the time."""
    rng = np.random.default_rng(seed)
    forecasts, truth = [], []
    for _ in range(n):
        b = int(rng.integers(2, 8))
        t = b if rng.random() < 0.4 else int(np.clip(b + rng.choice([-1, 1]), 1, 8))
        forecasts.append(_onehot(b, 0.9))
        truth.append(t)
    return forecasts, truth


@pytest.mark.parametrize("method", ["temperature", "isotonic"])
def test_recalibration_fitted_on_one_split_lowers_ece_and_nll_on_another(method):
    cal_f, cal_t = _overconfident(400, seed=1)
    test_f, test_t = _overconfident(400, seed=2)
    model = recalibration.fit_on_forecasts(method, cal_f, cal_t)
    after = recalibration.apply_to_forecasts(model, test_f)

    def scores(fs):
        conf = [f.confidence for f in fs]
        correct = [f.bin == t for f, t in zip(fs, test_t)]
        return scoring.ece(conf, correct), np.mean([scoring.nll(f.probabilities, t) for f, t in zip(fs, test_t)])

    ece_before, nll_before = scores(test_f)
    ece_after, nll_after = scores(after)
    assert ece_before > 0.4
    assert ece_after < 0.12
    assert nll_after < nll_before
    if method == "temperature":
        assert model.temperature > 1.5  # overconfident forecasts are softened
        assert [f.bin for f in after] == [f.bin for f in test_f]  # temperature never changes the ranking of bins


def test_recalibration_leaves_abstentions_alone_and_round_trips():
    cal_f, cal_t = _overconfident(100, seed=3)
    model = recalibration.fit_on_forecasts("isotonic", cal_f, cal_t)
    abstention = Forecast.abstention("no answer")
    out = recalibration.apply_to_forecasts(model, [abstention, cal_f[0]])
    assert out[0] is abstention
    again = recalibration.from_dict(model.to_dict())
    assert np.allclose(again.apply(np.array([cal_f[0].probabilities])), model.apply(np.array([cal_f[0].probabilities])))


def test_discovery_precision_and_recall_against_the_base_rate():
    rows = synthetic_rows({"p": [1.0, 2.0, 1.1, 0.5]})
    pairs = neighbour_pairs(rows, knob_values={"BLOCK": [32, 64, 128, 256]})  # (0,1) 2x, (1,0) .5x, (1,2) .55x, (2,1) 1.82x, (2,3) .45x, (3,2) 2.2x
    truth = [p["g_speedup"] >= math.sqrt(2) for p in pairs]
    assert sum(truth) == 3
    # confident "bin 7" on every real discovery and on one non-discovery; "bin 3" elsewhere
    wrong = truth.index(False)
    forecasts = [_onehot(7, 0.8) if t or i == wrong else _onehot(3, 0.8) for i, t in enumerate(truth)]
    report = discovery_report(forecasts, pairs, levels=(0.5, 0.9))
    assert report["base_rate"] == pytest.approx(0.5)
    at_half = report["by_probability"][0]
    assert (at_half["flagged"], at_half["true_positives"]) == (4, 3)
    assert at_half["precision"] == pytest.approx(0.75) and at_half["recall"] == 1.0
    assert at_half["lift"] == pytest.approx(1.5)
    assert report["by_probability"][1]["flagged"] == 0  # P(discovery) is 0.8 + 2 * 0.2/7 < 0.9
    assert report["by_confident_bin"][0]["flagged"] == 4


def test_reports_are_saved_listed_and_only_loaded_by_a_safe_id(tmp_path):
    rows = synthetic_rows({"a": [1.2, 0.8]})
    ev = evaluate([_onehot(5), _onehot(4)], rows)
    report = {"title": "t", "created_at": "2026-11-30T00:00:00+00:00", "surrogate": {"id": "roofline@1"},
              "dataset": {"name": "tiny"}, "evaluation": ev}
    first = save_report(tmp_path, dict(report))
    second = save_report(tmp_path, dict(report, id=first))
    assert second == first + "-2"
    assert [r["id"] for r in list_reports(tmp_path)] and load_report(tmp_path, first)["evaluation"]["rows"] == 2
    (tmp_path.parent / "secret.json").write_text("{}")
    with pytest.raises(ReportNotFound):
        load_report(tmp_path, "../secret")
