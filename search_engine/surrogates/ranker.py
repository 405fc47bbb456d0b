"""A learning-to-rank prior for the learned surrogate: LightGBM lambdarank over the recorded problems,
its scores turned into a forecast of the centred log speedup.

The bin classifier of surrogates.learned learns "how fast is this variant relative to its problem's
geometric mean" in eight coarse bins, so it says little about the order among a problem's fastest
variants, which is the order a search's first measurements follow. A ranker is trained for that order
alone: within each recorded problem (one query group each) it learns to put the fastest variants first,
with the variant's speedup quantile in its problem as the relevance label (lambdarank's gain is
truncated at the top `truncation` places).

A ranker's scores have no unit. They are made into a forecast in two steps, each fitted on problems the
ranker did not train on (GroupKFold over problems): the score is standardised by the spread of the
ranker's scores over its own training rows, and a straight line maps the standardised score to the
centred log speedup, with the spread of its out-of-fold residuals as the forecast's sd. A line, not an
isotonic fit: an isotonic fit is flat over the top scores and would throw away the very order the
ranker is for. A slope that is not positive (the ranker's order does not carry to new problems) leaves
a flat forecast that orders nothing.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata
from sklearn.model_selection import GroupKFold

from search_engine.bins import BinTable

LEVELS = 30
# The weight the app gives the prior (LearnedSurrogate(ranker_weight=...)). Chosen on 2026-12-03 on five
# families the search benchmark does not search (column_sum, gelu, layernorm, hgemm, hgemm_mma; leave one
# out, the share of 256-variant screens whose first pick reaches the target): 0.5 against 0, 0.25, 0.75
# and 1 (docs/search.md, "A ranking prior"). The eight searched families were not looked at to choose it.
APP_WEIGHT = 0.5
PARAMS = dict(n_estimators=200, learning_rate=0.05, num_leaves=15, min_child_samples=20, verbose=-1, n_jobs=1)


# How a variant's relevance label is made from its problem's speedups (RankPrior(relevance=...)):
# "quantile", its speedup's quantile in its problem; "near-best", how far it runs from its problem's fastest
# variant, in steps of NEAR_BEST_STEP. The quantile labels a problem's fastest variants 29, 28, 27 ... however close
# they run, so the ranker spends its top places on orders that a second recording reverses (reduce_sum's top
# variants lie within 0.6% of each other); the near-best labels give every variant within one step of the best the
# top label, which is the question a search's first measurements ask (is it within 5% of the best?).
RELEVANCES = ("quantile", "near-best")
NEAR_BEST_STEP = float(np.log(1 / 0.95))  # the search benchmark's target: 95% of the best


def relevance(log_speedups: np.ndarray, levels: int = LEVELS, how: str = "quantile") -> np.ndarray:
    """An integer label 0 .. levels-1 per variant of one problem. "quantile": the speedup's quantile; equal
    speedups get the same label whatever their order (breaking such ties arbitrarily moves a ranker a great
    deal). "near-best": levels-1 for a variant within NEAR_BEST_STEP (in log speedup) of the problem's fastest,
    one less per step further, 0 from levels-1 steps on."""
    log_speedups = np.asarray(log_speedups, dtype=float)
    if how == "near-best":
        steps = np.floor((log_speedups.max() - log_speedups) / NEAR_BEST_STEP)
        return np.clip(levels - 1 - steps, 0, levels - 1).astype(int)
    if how != "quantile":
        raise ValueError(f"The ranker's relevance must be one of {', '.join(RELEVANCES)}, not {how!r}.")
    order = rankdata(log_speedups, method="average") - 1
    return np.floor(order / max(len(log_speedups) - 1, 1) * (levels - 1)).astype(int)


class _Scored:
    """One fitted ranker with the mean and sd of its scores over its own training rows."""

    def __init__(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int, truncation: int,
                 weights: np.ndarray | None = None, how: str = "quantile") -> None:
        import lightgbm as lgb

        order = np.argsort(groups, kind="stable")  # lambdarank wants each query's rows together
        X, y, groups = X[order], y[order], groups[order]
        weights = None if weights is None else np.asarray(weights)[order]
        labels = np.concatenate([relevance(y[groups == g], how=how) for g in np.unique(groups)])
        sizes = [int(np.sum(groups == g)) for g in np.unique(groups)]
        self.model = lgb.LGBMRanker(objective="lambdarank", label_gain=list(range(LEVELS + 1)),
                                    lambdarank_truncation_level=truncation, random_state=seed, **PARAMS)
        # (a query's rows share one weight: lambdarank scales each row's gradient by its weight)
        self.model.fit(X, labels, group=sizes, sample_weight=weights)
        own = self.model.predict(X)
        self.mean, self.sd = float(own.mean()), float(own.std()) or 1.0

    def z(self, X: np.ndarray) -> np.ndarray:
        return (self.model.predict(X) - self.mean) / self.sd


class RankPrior:
    """fit(X, centred log speedups, problem of each row); probabilities(X, bins): bin probabilities of
    the centred speedup (normals around the calibrated score)."""

    def __init__(self, seed: int = 0, folds: int = 3, truncation: int = 50, min_sigma: float = 0.1,
                 committee: bool = False, relevance: str = "quantile") -> None:
        if relevance not in RELEVANCES:
            raise ValueError(f"The ranker's relevance must be one of {', '.join(RELEVANCES)}, not {relevance!r}.")
        self.seed, self.folds, self.truncation, self.min_sigma = seed, folds, truncation, min_sigma
        self.relevance = relevance
        # committee: the score is the average of the standardised scores of the ranker trained on every
        # problem and of the folds' rankers (fitted anyway for the line), rescaled to the spread of one
        # ranker's over the training rows, so that the line fitted on one ranker's out-of-fold scores holds.
        self.committee = committee
        self.members: list[_Scored] = []
        self.committee_sd = 1.0
        self.ranker: _Scored | None = None
        self.intercept, self.slope, self.sigma = 0.0, 0.0, 1.0

    def fit(self, X: np.ndarray, y: np.ndarray, groups, weights: np.ndarray | None = None) -> "RankPrior":
        """weights: per row, the same within a problem (LearnedSurrogate's family weights), or None."""
        groups = np.asarray([str(g) for g in groups])
        weights = None if weights is None else np.asarray(weights, dtype=float)
        problems = np.unique(groups)
        if len(problems) < 2:
            raise ValueError("The ranking prior needs measurements of at least two problems (it calibrates "
                             "its scores on problems it did not train on).")
        z_oof = np.zeros(len(y))
        members = []
        for train, test in GroupKFold(n_splits=min(self.folds, len(problems))).split(X, y, groups):
            members.append(_Scored(X[train], y[train], groups[train], self.seed, self.truncation,
                                   None if weights is None else weights[train], self._relevance))
            z_oof[test] = members[-1].z(X[test])
        slope, intercept = np.polyfit(z_oof, y, 1) if np.ptp(z_oof) > 1e-12 else (0.0, float(y.mean()))
        self.slope, self.intercept = max(float(slope), 0.0), float(intercept if slope > 0 else y.mean())
        residual = y - (self.intercept + self.slope * z_oof)
        self.sigma = max(float(np.sqrt(np.mean(residual ** 2))), self.min_sigma)
        self.ranker = _Scored(X, y, groups, self.seed, self.truncation, weights, self._relevance)
        self.members = members if self.committee else []
        if self.members:
            self.committee_sd = float(np.std(self._committee_z(X))) or 1.0
        return self

    @property
    def _relevance(self) -> str:
        return getattr(self, "relevance", "quantile")  # (a prior saved before the option made quantile labels)

    def _committee_z(self, X: np.ndarray) -> np.ndarray:
        return np.mean([scored.z(X) for scored in [self.ranker, *self.members]], axis=0)

    def z(self, X: np.ndarray) -> np.ndarray:
        """The standardised score: the ranker's, or the committee's rescaled to one ranker's spread."""
        if not getattr(self, "members", None):  # (a prior saved before the committee has none)
            return self.ranker.z(X)
        return self._committee_z(X) / self.committee_sd

    def mean(self, X: np.ndarray) -> np.ndarray:
        """The forecast centred log speedup of each row."""
        return self.intercept + self.slope * self.z(X)

    def probabilities(self, X: np.ndarray, bins: BinTable) -> np.ndarray:
        from search_engine.surrogates.learned import _normal_bins

        mu = self.mean(X)
        return _normal_bins(mu, np.full(len(mu), self.sigma), bins)
