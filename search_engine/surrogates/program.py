"""The learned surrogate of PyTorch-program problems (KernelBench `ModelNew` candidates): gradient-
boosted trees (LightGBM) over features that carry across problems and GPUs (program_features), and
a forecast that is calibrated before and after the run's first measurements.

- A regressor of log speedup (objective "regression", a Huber loss) or a ranker trained within each
  pool, one task on one GPU ("lambdarank"), whose score is mapped to log speedup by a line fitted on
  the training rows. Trees train in seconds and forecast on one CPU thread.
- The forecast over the bins is conformal: the model's log speedup plus the out-of-fold residuals
  (task-grouped folds, so every residual is the error on a task the fold never saw). Cold, before
  any measurement of the run, the residuals hold the unknown level of a new task.
- A classifier of whether a candidate gets a speedup at all (builds, is correct, passes the guards):
  the bins forecast the speedup if it works, and the expected log speedup that ranks candidates
  (`log_mean`) adds log P(works), so that a program likely to be rejected ranks low.
- From the run (learn): the level moves by beta_n times the mean gap between the run's n measured
  log speedups and the model's forecasts of them; beta_n and the residuals that follow are those of
  the same procedure replayed out of fold (the n candidates forecast fastest in a pool measured
  first, the rest forecast), so that a confidence means the same on a task the model has never seen.

The fitted model saves to one small JSON file (search_engine/surrogates/models/), loaded without
pickle; `ProgramSurrogate.shipped()` is the model the app uses for PyTorch problems.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.heldout import refuse_held_out
from search_engine.surrogates.base import Forecast, ForecastRequest
from search_engine.surrogates.program_features import HARDWARE_FEATURES, feature_names, features_matrix

SHIPPED_MODEL = Path(__file__).with_name("models") / "program_lgbm.json.gz"
_RESIDUAL_KEEP = 401  # quantiles kept of each residual distribution (the saved file stays small)
_MAX_MEASURED = 3  # residuals after 1, 2 and 3 measured rows; more rows use the last
_MIN_OK = 0.01  # the smallest chance of working that the ranking weighs in


def _request(row: dict) -> ForecastRequest:
    request = row.get("request")
    if not isinstance(request, ForecastRequest):
        raise ValueError("A program surrogate row needs a ForecastRequest under 'request'.")
    return request


def _is_measured(row: dict) -> bool:
    speedup = row.get("speedup")
    return isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0


# Whether a candidate works does not hang on the GPU: the classifier sees neither the hardware nor the
# reference's times on it (in the records only the H200 rows carry guards and a measured reference,
# so these would stand in for the measurement's rules, which kernellab_guards states).
_OK_LEFT_OUT = set(HARDWARE_FEATURES) | {"log_ref_ms", "log_ref_over_roofline", "log_t_mem_us", "log_t_flop_us",
                                         "log_ridge"}


@lru_cache(maxsize=1)
def _ok_columns() -> list[int]:
    return [i for i, name in enumerate(feature_names()) if name not in _OK_LEFT_OUT]


def _is_miss(row: dict) -> bool:
    """A row measured without a speedup: failed to build, wrong, or rejected by a guard."""
    return row.get("speedup") is None and str(row.get("status") or "ok") != "ok"


def _measured(rows: list[dict]) -> list[dict]:
    return [r for r in rows if _is_measured(r)]


def _quantiles(values: np.ndarray) -> np.ndarray:
    values = np.sort(np.asarray(values, dtype=float))
    if values.size <= _RESIDUAL_KEEP:
        return values
    return np.quantile(values, np.linspace(0, 1, _RESIDUAL_KEEP))


class ProgramSurrogate:
    name = "learned-program"

    def __init__(self, *, objective: str = "regression", bins: BinTable = DEFAULT_BINS, seed: int = 0,
                 n_estimators: int = 300, learning_rate: float = 0.04, num_leaves: int = 15,
                 min_child_samples: int = 10, folds: int = 5, version: str = "1") -> None:
        if objective not in ("regression", "lambdarank"):
            raise ValueError("The objective must be 'regression' (log speedup) or 'lambdarank' (order within a pool).")
        self.objective = objective
        self.bins = bins
        self.seed = seed
        self.params = dict(n_estimators=n_estimators, learning_rate=learning_rate, num_leaves=num_leaves,
                           min_child_samples=min_child_samples)
        self.folds = folds
        self.version = version
        self._booster = None
        self._ok_booster = None  # P(the candidate gets a speedup at all)
        self._scale = (0.0, 1.0)  # lambdarank: log speedup = a + b * score
        self._residuals: list[np.ndarray] = []  # [cold, after 1, after 2, after 3 measured rows]
        self._betas: list[float] = []  # the share of the measured rows' mean gap that moves the level
        self._shift = 0.0
        self._measured_n = 0
        self.trained_rows = 0
        self.trained_tasks = 0

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    # ---- training ---------------------------------------------------------------------------
    def fit(self, rows: list[dict], groups: list | None = None) -> "ProgramSurrogate":
        """Train on measured rows ({"request", "speedup", "task", "gpu"}); rows without a speedup are
        skipped. groups names each row's pool (task and GPU); by default (task, gpu) of each row.
        A row of a held-out task (search_engine/heldout.py) is refused."""
        refuse_held_out({r.get("task") or (_request(r).problem or {}).get("name") for r in rows})
        pool_of = list(groups) if groups is not None else [(r.get("task"), r.get("gpu")) for r in rows]
        kept = [i for i, r in enumerate(rows) if _is_measured(r)]
        if len(kept) < 10:
            raise ValueError("The program surrogate needs at least 10 measured rows to train.")
        self._ok_booster = self._train_ok(rows)
        X = features_matrix([_request(rows[i]) for i in kept])
        y = np.log([rows[i]["speedup"] for i in kept])
        pools = [pool_of[i] for i in kept]
        tasks = [p[0] if isinstance(p, tuple) else p for p in pools]
        oof = self._out_of_fold(X, y, pools, tasks)
        self._booster, self._scale = self._train(X, y, pools)
        if self.objective == "lambdarank":
            self._scale = _line(oof, y)
            oof = self._scale[0] + self._scale[1] * oof
        self._residuals, self._betas = _residual_sets(oof, y, pools)
        self._moments = {}
        self._shift, self._measured_n = 0.0, 0
        self.trained_rows, self.trained_tasks = len(y), len(set(tasks))
        return self

    def _train(self, X, y, pools):
        import lightgbm as lgb

        common = dict(random_state=self.seed, n_jobs=1, verbose=-1, subsample=0.8, subsample_freq=1,
                      colsample_bytree=0.8, **self.params)
        if self.objective == "regression":
            model = lgb.LGBMRegressor(objective="huber", alpha=1.0, **common)
            model.fit(X, y)
            return model.booster_, (0.0, 1.0)
        order = np.argsort([str(p) for p in pools], kind="stable")
        labels = _relevance(y[order], [pools[i] for i in order])
        sizes = _group_sizes([pools[i] for i in order])
        model = lgb.LGBMRanker(objective="lambdarank", **common)
        model.fit(X[order], labels, group=sizes)
        return model.booster_, (0.0, 1.0)

    def _train_ok(self, rows: list[dict]):
        """A classifier of whether a candidate gets a speedup at all (built, correct, not rejected by a
        guard), on every row whose outcome is known; None while the rows hold fewer than 5 of either."""
        import lightgbm as lgb

        known = [r for r in rows if _is_measured(r) or _is_miss(r)]
        labels = np.array([1 if _is_measured(r) else 0 for r in known])
        if labels.sum() < 5 or (1 - labels).sum() < 5:
            return None
        model = lgb.LGBMClassifier(n_estimators=150, learning_rate=0.05, num_leaves=15, min_child_samples=10,
                                   random_state=self.seed, n_jobs=1, verbose=-1)
        model.fit(features_matrix([_request(r) for r in known])[:, _ok_columns()], labels)
        return model.booster_

    def _out_of_fold(self, X, y, pools, tasks) -> np.ndarray:
        """Predictions of each row by a model that never saw its task (grouped folds)."""
        unique = sorted(set(tasks), key=str)
        rng = np.random.default_rng(self.seed)
        fold_of = {t: f % self.folds for f, t in enumerate(rng.permutation(len(unique)))}
        fold_of = {unique[i]: f for i, f in fold_of.items()}
        folds = np.array([fold_of[t] for t in tasks])
        oof = np.zeros(len(y))
        for f in range(self.folds):
            test = folds == f
            if not test.any() or test.all():
                continue
            train = ~test
            booster, _ = self._train(X[train], y[train], [p for p, t in zip(pools, train) if t])
            oof[test] = booster.predict(X[test], num_threads=1)
        return oof

    # ---- the run ------------------------------------------------------------------------------
    def learn(self, rows: list[dict]) -> None:
        """The run's measured rows so far (all of them): the level moves to theirs."""
        kept = _measured(rows)
        self._measured_n = len(kept)
        if not kept or self._booster is None:
            self._shift = 0.0
            return
        mu = self._mean(features_matrix([_request(r) for r in kept]))
        gaps = np.log([r["speedup"] for r in kept]) - mu
        self._shift = float(self._betas[min(len(kept), _MAX_MEASURED)] * gaps.mean())

    def reset_run(self) -> None:
        self._shift, self._measured_n = 0.0, 0

    # ---- forecasting --------------------------------------------------------------------------
    def _mean(self, X: np.ndarray) -> np.ndarray:
        score = self._booster.predict(X, num_threads=1)
        return self._scale[0] + self._scale[1] * score

    def log_speedups(self, requests: list[ForecastRequest]) -> np.ndarray:
        """The point forecast of log speedup of each request, the run's level included."""
        return self._mean(features_matrix(requests)) + self._shift

    def ok_probability(self, X: np.ndarray) -> np.ndarray:
        """The chance each candidate gets a speedup at all (1 without a classifier)."""
        if self._ok_booster is None:
            return np.ones(X.shape[0])
        return np.clip(self._ok_booster.predict(X[:, _ok_columns()], num_threads=1), 0.0, 1.0)

    def _residual(self) -> np.ndarray:
        return self._residuals[min(self._measured_n, _MAX_MEASURED)]

    def _stage_moments(self) -> tuple[float, float]:
        """(median, standard deviation) of the residuals of the run's stage, computed once."""
        stage = min(self._measured_n, _MAX_MEASURED)
        moments = self.__dict__.setdefault("_moments", {})
        if stage not in moments:
            residuals = self._residuals[stage]
            moments[stage] = (float(np.median(residuals)), float(np.std(residuals)))
        return moments[stage]

    def probabilities(self, mu: np.ndarray) -> np.ndarray:
        """Bin probabilities of log speedup mu + r, r drawn from the residuals of the run's stage."""
        residuals = self._residual()
        edges = np.log(np.asarray(self.bins.edges, dtype=float))
        # P(S < edge) = share of residuals below edge - mu, a quarter of a sample as a floor per bin.
        cdf = np.empty((len(mu), len(edges) + 2))
        cdf[:, 0], cdf[:, -1] = 0.0, 1.0
        cdf[:, 1:-1] = np.searchsorted(residuals, (edges[None, :] - mu[:, None]).ravel(),
                                       side="left").reshape(len(mu), -1) / residuals.size
        p = np.diff(cdf, axis=1) + 0.25 / residuals.size
        return p / p.sum(axis=1, keepdims=True)

    def forecast(self, request: ForecastRequest) -> Forecast:
        return self.forecast_many([request])[0]

    def forecast_many(self, requests: list[ForecastRequest]) -> list[Forecast]:
        if not requests:
            return []
        if self._booster is None:
            return [Forecast.abstention("The program surrogate is not trained yet.", surrogate=self.id)
                    for _ in requests]
        started = time.perf_counter()
        X = features_matrix(requests)
        mu = self._mean(X) + self._shift
        ok = self.ok_probability(X)
        probabilities = self.probabilities(mu)
        centre, sd = self._stage_moments()
        latency = (time.perf_counter() - started) / len(requests)
        stage = (f"level from {self._measured_n} of this run's measurements" if self._measured_n
                 else "no measurement of this run yet")
        reasoning = (f"program surrogate ({self.objective}) trained on {self.trained_rows} measurements of "
                     f"{self.trained_tasks} tasks; {stage}")
        out = []
        for i, p in enumerate(probabilities):
            # The bins forecast the speedup if the candidate works; log_mean, by which candidates are
            # ranked, also weighs in the chance that it fails (a failure is worth nothing to a run).
            text = reasoning if ok[i] > 0.995 else f"{reasoning}; {1 - ok[i]:.0%} chance it fails or is rejected"
            forecast = Forecast.from_probabilities(p, surrogate=self.id, latency_s=latency, reasoning=text)
            forecast.log_mean = float(mu[i] + centre + math.log(max(ok[i], _MIN_OK)))
            forecast.log_sd = sd
            out.append(forecast)
        return out

    # ---- persistence --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        if self._booster is None:
            raise ValueError("Only a trained program surrogate can be saved.")
        return {
            "kind": "program-surrogate", "version": self.version, "objective": self.objective,
            "feature_names": feature_names(), "bins": list(self.bins.edges), "scale": list(self._scale),
            "betas": self._betas, "params": self.params, "seed": self.seed,
            "residuals": [[round(float(v), 5) for v in r] for r in self._residuals],
            "trained_rows": self.trained_rows, "trained_tasks": self.trained_tasks,
            "booster": self._booster.model_to_string(num_iteration=-1),
            "ok_booster": self._ok_booster.model_to_string(num_iteration=-1) if self._ok_booster else None,
        }

    def save(self, path) -> None:
        data = json.dumps(self.to_dict()).encode()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)

    @classmethod
    def load(cls, path) -> "ProgramSurrogate":
        import lightgbm as lgb

        path = Path(path)
        try:
            raw = path.read_bytes()
            data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} is not a saved program surrogate: {exc}") from None
        if data.get("kind") != "program-surrogate":
            raise ValueError(f"{path} is not a saved program surrogate.")
        if data.get("feature_names") != feature_names():
            raise ValueError(f"{path} was trained on other features than this version computes; train it again "
                             "(python benchmarks/surrogate_heldout.py --save-model).")
        model = cls(objective=data["objective"], bins=BinTable(tuple(data["bins"])), seed=data.get("seed", 0),
                    version=data["version"], **data["params"])
        model._booster = lgb.Booster(model_str=data["booster"])
        model._ok_booster = lgb.Booster(model_str=data["ok_booster"]) if data.get("ok_booster") else None
        model._scale = tuple(data["scale"])
        model._residuals = [np.asarray(r, dtype=float) for r in data["residuals"]]
        model._betas = [float(b) for b in data["betas"]]
        model.trained_rows, model.trained_tasks = data["trained_rows"], data["trained_tasks"]
        return model

    @classmethod
    def shipped(cls) -> "ProgramSurrogate":
        """The model trained on every task outside the held-out set, shipped in the repository."""
        return cls.load(SHIPPED_MODEL)


def _relevance(y: np.ndarray, pools: list) -> np.ndarray:
    """Integer relevance within each pool for lambdarank: the rank of the speedup (0 = slowest)."""
    out = np.zeros(len(y), dtype=int)
    index: dict = {}
    for i, p in enumerate(pools):
        index.setdefault(p, []).append(i)
    for members in index.values():
        order = np.argsort(y[members], kind="stable")
        for rank, j in enumerate(order):
            out[members[j]] = rank
    return out


def _group_sizes(pools_sorted: list) -> list[int]:
    sizes, last = [], object()
    for p in pools_sorted:
        if p != last:
            sizes.append(0)
            last = p
        sizes[-1] += 1
    return sizes


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if np.std(x) < 1e-12:
        return float(np.mean(y)), 0.0
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def _residual_sets(oof: np.ndarray, y: np.ndarray, pools: list) -> tuple[list[np.ndarray], list[float]]:
    """Residual distributions and level weights, cold and after n = 1.._MAX_MEASURED measured rows of
    a pool, replayed on the out-of-fold forecasts as a run goes: the pool's n candidates forecast
    fastest are measured first. The level moves by beta_n times their mean gap (beta_n by least squares
    over every pool: how much of the measured rows' gap the other rows share; the first measured row is
    the one forecast fastest, so its gap is partly its own luck), and the pool's other rows are scored."""
    cold = y - oof
    residuals_out, betas = [_quantiles(cold)], [0.0]
    index: dict = {}
    for i, p in enumerate(pools):
        index.setdefault(p, []).append(i)
    for n in range(1, _MAX_MEASURED + 1):
        gaps, others = [], []
        for members in index.values():
            if len(members) <= n:
                continue
            order = sorted(members, key=lambda i: -oof[i])
            measured, rest = order[:n], order[n:]
            gap = float(np.mean(cold[measured]))
            gaps.extend([gap] * len(rest))
            others.extend(cold[rest])
        if len(others) < 20:
            residuals_out.append(residuals_out[-1])
            betas.append(betas[-1])
            continue
        gaps_a, others_a = np.asarray(gaps), np.asarray(others)
        beta = float(np.clip(np.dot(gaps_a, others_a) / max(np.dot(gaps_a, gaps_a), 1e-12), 0.0, 1.0))
        residuals_out.append(_quantiles(others_a - beta * gaps_a))
        betas.append(beta)
    return residuals_out, betas
