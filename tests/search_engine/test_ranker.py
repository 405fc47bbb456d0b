"""The lambdarank prior (search_engine/surrogates/ranker.py) and the learned surrogate that mixes it in."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from search_engine.bins import DEFAULT_BINS
from search_engine.surrogates.base import ForecastRequest
from search_engine.surrogates.learned import LearnedSurrogate
from search_engine.surrogates.ranker import RankPrior, relevance
from tests.search_engine.fakes import REFERENCE, render, space, true_speedup

pytest.importorskip("lightgbm")


def problems(informative: bool, count: int = 5, rows: int = 160, seed: int = 0):
    """Rows of `count` problems: column 0 sets the order within a problem (when informative), column 1
    is a per-problem constant that sets its level, column 2 is noise."""
    rng = np.random.default_rng(seed)
    X, y, groups = [], [], []
    for g in range(count):
        level = rng.normal(0, 1.0)
        x0 = rng.uniform(-1, 1, rows)
        noise = rng.normal(0, 0.05, rows)
        logs = (0.8 * x0 if informative else rng.normal(0, 0.5, rows)) + noise
        X.append(np.column_stack([x0, np.full(rows, level), rng.normal(0, 1, rows)]))
        y.append(logs - logs.mean())
        groups += [f"p{g}"] * rows
    return np.vstack(X), np.concatenate(y), np.array(groups)


def test_relevance_is_the_quantile_in_the_problem_and_ties_share_a_label():
    labels = relevance(np.array([0.1, 0.5, 0.5, 0.9, -1.0]), levels=5)
    assert labels[1] == labels[2] and labels[4] == 0 and labels[3] == 4 and labels[0] < labels[1]


def test_the_prior_orders_a_problem_it_never_saw_and_its_spread_is_out_of_fold():
    X, y, g = problems(informative=True)
    held = g == "p4"
    prior = RankPrior(seed=0).fit(X[~held], y[~held], g[~held])
    mean = prior.mean(X[held])
    # lambdarank's gain stops at the top 50 places, so the order it learns is that of the fastest variants
    quantile = (np.argsort(np.argsort(y[held])) + 0.5) / held.sum()
    assert quantile[np.argsort(-mean)[:10]].min() > 0.8
    assert spearmanr(mean, y[held]).statistic > 0.7
    assert prior.slope > 0 and prior.min_sigma <= prior.sigma < float(np.std(y))
    probabilities = prior.probabilities(X[held], DEFAULT_BINS)
    assert probabilities.shape == (held.sum(), DEFAULT_BINS.n_bins)
    assert np.allclose(probabilities.sum(axis=1), 1.0)
    reps = np.log(DEFAULT_BINS.representatives())
    assert quantile[np.argsort(-(probabilities @ reps))[:10]].min() > 0.8


def test_an_order_that_does_not_carry_to_new_problems_gives_a_nearly_flat_forecast():
    X, y, g = problems(informative=False)
    prior = RankPrior(seed=0).fit(X, y, g)
    informed = RankPrior(seed=0).fit(*problems(informative=True))
    assert np.std(prior.mean(X)) < 0.25 * np.std(informed.mean(X))


def test_one_problem_is_not_enough_to_calibrate_on_problems_it_did_not_train_on():
    X, y, g = problems(informative=True, count=1)
    with pytest.raises(ValueError, match="at least two problems"):
        RankPrior().fit(X, y, g)


def _rows():
    out = []
    for knobs in space().all_valid():
        s = true_speedup(knobs)
        if isinstance(s, str):
            continue
        out.append({"reference": REFERENCE, "candidate": render(knobs), "speedup": s, "reference_ms": 0.5,
                    "problem": {"name": "scale", "sizes": {"N": 1 << 24}, "roofline": {"bytes": "8*N", "flops": "N"}}})
    return out


def _requests(rows):
    return [ForecastRequest(reference=r["reference"], candidate=r["candidate"], problem=r["problem"],
                            reference_ms=0.5) for r in rows]


def test_the_learned_surrogate_mixes_the_prior_in_and_keeps_it_through_save_and_load(tmp_path):
    rows = _rows()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(rows))
    # two recorded "problems" at different levels (the ranker needs two), and variants neither holds
    a, b, test = ([rows[i] for i in part] for part in np.array_split(idx, 3))
    train = a + [dict(r, speedup=3 * r["speedup"]) for r in b]
    groups = ["a"] * len(a) + ["b"] * len(b)
    plain = LearnedSurrogate(seed=0).fit(train, groups=groups)
    mixed = LearnedSurrogate(seed=0, ranker_weight=0.5).fit(train, groups=groups)
    assert plain._ranker is None and mixed._ranker is not None
    requests = _requests(test)
    truth = np.log([r["speedup"] for r in test])
    p_plain, p_mixed = plain.predict_proba(requests), mixed.predict_proba(requests)
    assert np.allclose(p_mixed.sum(axis=1), 1.0) and not np.allclose(p_plain, p_mixed)
    expected = [f.expected_log_speedup() for f in mixed.forecast_many(requests)]
    assert spearmanr(expected, truth).statistic > 0.6
    # Weight 0 after fitting is the classifier alone.
    mixed.ranker_weight = 0.0
    assert np.allclose(mixed.predict_proba(requests), p_plain)
    mixed.ranker_weight = 0.5
    mixed.save(tmp_path / "m.joblib")
    assert np.allclose(LearnedSurrogate.load(tmp_path / "m.joblib").predict_proba(requests), p_mixed)
    # A model saved before the prior existed loads without one.
    older = LearnedSurrogate(seed=0).fit(train, groups=groups)
    del older.__dict__["ranker_weight"], older.__dict__["_ranker"]
    older.save(tmp_path / "old.joblib")
    assert np.allclose(LearnedSurrogate.load(tmp_path / "old.joblib").predict_proba(requests), p_plain)


def test_the_committee_prior_averages_the_folds_rankers_at_one_rankers_spread():
    X, y, g = problems(informative=True)
    held = g == "p4"
    single = RankPrior(seed=0).fit(X[~held], y[~held], g[~held])
    committee = RankPrior(seed=0, committee=True).fit(X[~held], y[~held], g[~held])
    assert single.members == [] and len(committee.members) == 3
    # the line and its spread are fitted on the same out-of-fold scores; only the score changes
    assert committee.slope == single.slope and committee.sigma == single.sigma
    z = committee.z(X[~held])
    assert abs(float(np.std(z)) - 1.0) < 1e-9
    expected = np.mean([s.z(X[held]) for s in [committee.ranker, *committee.members]], axis=0) / committee.committee_sd
    assert np.allclose(committee.z(X[held]), expected)
    assert not np.allclose(committee.mean(X[held]), single.mean(X[held]))
    assert spearmanr(committee.mean(X[held]), y[held]).statistic > 0.7
    # a prior saved before the committee existed scores with its one ranker
    del committee.__dict__["members"]
    assert np.allclose(committee.z(X[held]), committee.ranker.z(X[held]))


def test_the_committee_averages_the_calibration_folds_models_and_survives_save_and_load(tmp_path):
    rows = _rows()
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(rows))
    parts = np.array_split(idx, 4)
    # three recorded "problems" at different levels, and variants none of them holds
    train, groups = [], []
    for name, scale, part in zip("abc", (1.0, 3.0, 0.5), parts[:3]):
        train += [dict(rows[i], speedup=scale * rows[i]["speedup"]) for i in part]
        groups += [name] * len(part)
    test = [rows[i] for i in parts[3]]
    single = LearnedSurrogate(seed=0, ranker_weight=0.5).fit(train, groups=groups)
    committee = LearnedSurrogate(seed=0, ranker_weight=0.5, committee=True).fit(train, groups=groups)
    assert single._fitted.members == () and len(committee._fitted.members) == 3
    assert committee.temperature == single.temperature
    requests = _requests(test)
    p_single, p_committee = single.predict_proba(requests), committee.predict_proba(requests)
    assert np.allclose(p_committee.sum(axis=1), 1.0) and not np.allclose(p_single, p_committee)
    # without its members (and its ranker's), the committee is the single model exactly
    members, ranker_members = committee._fitted.members, committee._ranker.members
    committee._fitted.members, committee._ranker.members = (), []
    assert np.allclose(committee.predict_proba(requests), p_single)
    committee._fitted.members, committee._ranker.members = members, ranker_members
    truth = np.log([r["speedup"] for r in test])
    expected = [f.expected_log_speedup() for f in committee.forecast_many(requests)]
    assert spearmanr(expected, truth).statistic > 0.6
    committee.save(tmp_path / "c.joblib")
    assert np.allclose(LearnedSurrogate.load(tmp_path / "c.joblib").predict_proba(requests), p_committee)
    # a model saved before the committee existed loads as a single model
    older = LearnedSurrogate(seed=0, ranker_weight=0.5).fit(train, groups=groups)
    del older.__dict__["committee"]
    older.save(tmp_path / "old.joblib")
    loaded = LearnedSurrogate.load(tmp_path / "old.joblib")
    assert loaded.committee is False and np.allclose(loaded.predict_proba(requests), p_single)


def test_near_best_relevance_counts_steps_of_five_percent_down_from_the_problems_fastest():
    from search_engine.surrogates.ranker import NEAR_BEST_STEP

    best = 2.0
    logs = np.log([best, best * 0.994, best * 0.951, best * 0.94, best * 0.89, best * 0.5, best * 0.01])
    labels = relevance(logs, levels=30, how="near-best")
    # within one step (95% of the best) every variant shares the top label, however they are ordered there
    assert list(labels[:3]) == [29, 29, 29]
    assert labels[3] == 28 and labels[4] == 27  # 94% is one step down, 89% two
    assert labels[5] == 29 - int(np.log(2) // NEAR_BEST_STEP) and labels[6] == 0
    # the quantile labels part the first two, which a second recording can swap
    assert relevance(logs, levels=30)[0] != relevance(logs, levels=30)[1]
    with pytest.raises(ValueError, match="relevance"):
        relevance(logs, how="rank")
    with pytest.raises(ValueError, match="relevance"):
        RankPrior(relevance="rank")


def test_a_near_best_prior_orders_a_problem_it_never_saw_and_the_surrogate_keeps_it_through_save_and_load(tmp_path):
    X, y, g = problems(informative=True)
    held = g == "p4"
    quantile = RankPrior(seed=0).fit(X[~held], y[~held], g[~held])
    near = RankPrior(seed=0, relevance="near-best").fit(X[~held], y[~held], g[~held])
    mean = near.mean(X[held])
    rank = (np.argsort(np.argsort(y[held])) + 0.5) / held.sum()
    assert rank[np.argsort(-mean)[:10]].min() > 0.8 and near.slope > 0
    assert not np.allclose(mean, quantile.mean(X[held]))
    # through the learned surrogate, and through save and load
    rows = _rows()
    idx = np.random.default_rng(0).permutation(len(rows))
    a, b, test = ([rows[i] for i in part] for part in np.array_split(idx, 3))
    train = a + [dict(r, speedup=3 * r["speedup"]) for r in b]
    groups = ["a"] * len(a) + ["b"] * len(b)
    model = LearnedSurrogate(seed=0, ranker_weight=0.5, ranker_relevance="near-best").fit(train, groups=groups)
    assert model._ranker.relevance == "near-best"
    requests = _requests(test)
    probabilities = model.predict_proba(requests)
    model.save(tmp_path / "m.joblib")
    loaded = LearnedSurrogate.load(tmp_path / "m.joblib")
    assert loaded.ranker_relevance == "near-best" and np.allclose(loaded.predict_proba(requests), probabilities)
    # a model saved before the option existed labelled its ranker's rows by quantile
    del model.__dict__["ranker_relevance"], model._ranker.__dict__["relevance"]
    model.save(tmp_path / "old.joblib")
    older = LearnedSurrogate.load(tmp_path / "old.joblib")
    assert older.ranker_relevance == "quantile" and older._ranker._relevance == "quantile"
    with pytest.raises(ValueError, match="relevance"):
        LearnedSurrogate(ranker_relevance="rank")
