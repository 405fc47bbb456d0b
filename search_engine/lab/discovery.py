"""Discovery detection: does the surrogate see a child that is much faster than its parent coming?

For each parent -> child pair the surrogate forecasts the child against its parent (the parent is
the anchor, so the bins are of g = T_parent / T_child). A pair is a discovery when g >= ratio
(√2 by default). Two ways of flagging, each at several levels:
- by probability: P(g >= ratio) under the forecast is at least the level;
- by confident forecast: the predicted bin lies wholly at or above the ratio and the forecast's
  confidence is at least the level.
Each row gives precision and recall beside chance: a flagger that picks the same number of pairs at
random has precision = the base rate and recall = the fraction flagged.
"""

from __future__ import annotations

import math

import numpy as np

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.surrogates.base import Forecast

LEVELS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def _row(flagged: np.ndarray, truth: np.ndarray, level: float) -> dict:
    tp = int((flagged & truth).sum())
    fp = int((flagged & ~truth).sum())
    fn = int((~flagged & truth).sum())
    n = truth.size
    base = float(truth.mean()) if n else 0.0
    precision = tp / (tp + fp) if tp + fp else None
    return {
        "level": level, "flagged": int(flagged.sum()), "true_positives": tp,
        "precision": precision, "recall": tp / (tp + fn) if tp + fn else None,
        "chance_precision": base, "chance_recall": float(flagged.mean()) if n else 0.0,
        "lift": precision / base if precision is not None and base > 0 else None,
    }


def discovery_report(forecasts: list[Forecast], pairs: list[dict], *, ratio: float = math.sqrt(2),
                     levels: tuple[float, ...] = LEVELS, bins: BinTable = DEFAULT_BINS) -> dict:
    if len(forecasts) != len(pairs):
        raise ValueError("There must be one forecast per pair.")
    if not pairs:
        raise ValueError("Discovery detection needs at least one parent -> child pair.")
    truth = np.array([float(p["g_speedup"]) >= ratio for p in pairs])
    answered = np.array([not f.abstained and bool(f.probabilities) for f in forecasts])
    prob = np.array([f.prob_at_least(ratio, bins) if a else 0.0 for f, a in zip(forecasts, answered)])
    confident_up = np.array([a and bins.lower(f.bin) >= ratio * (1 - 1e-3) for f, a in zip(forecasts, answered)])
    confidence = np.array([f.confidence if a else 0.0 for f, a in zip(forecasts, answered)])
    by_problem = {}
    for name in sorted({p["problem_id"] for p in pairs}):
        idx = np.array([p["problem_id"] == name for p in pairs])
        by_problem[name] = {"pairs": int(idx.sum()), "discoveries": int(truth[idx].sum())}
    return {
        "ratio": ratio, "pairs": len(pairs), "answered": int(answered.sum()),
        "discoveries": int(truth.sum()), "base_rate": float(truth.mean()),
        "mean_probability_on_discoveries": float(prob[truth].mean()) if truth.any() else None,
        "mean_probability_on_others": float(prob[~truth].mean()) if (~truth).any() else None,
        "by_probability": [_row(prob >= level, truth, level) for level in levels],
        "by_confident_bin": [_row(confident_up & (confidence >= level), truth, level) for level in levels],
        "per_problem": by_problem,
    }
