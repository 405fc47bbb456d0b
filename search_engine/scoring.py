"""Scoring rules for ordinal bin forecasts, as published for GPU Forecasters.

Probabilities are sequences of K non-negative numbers summing to 1; true and predicted bins are
1-based. Selective-prediction curves take per-forecast confidences and losses (e.g. 0/1 error).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

REWARD_KINDS = ("correctness", "brier", "crps")


def _probs(probabilities: Sequence[float]) -> np.ndarray:
    p = np.asarray(probabilities, dtype=float)
    if p.ndim != 1 or p.size < 2:
        raise ValueError("A forecast must be a flat list of at least two bin probabilities.")
    return p


def _onehot(k: int, true_bin: int) -> np.ndarray:
    if not 1 <= true_bin <= k:
        raise ValueError(f"True bin must be within 1..{k}, got {true_bin!r}.")
    y = np.zeros(k)
    y[true_bin - 1] = 1.0
    return y


def brier(probabilities: Sequence[float], true_bin: int) -> float:
    """Brier = 1/2 sum_b (p_b - y_b)^2, in [0, 1]."""
    p = _probs(probabilities)
    y = _onehot(p.size, true_bin)
    return float(0.5 * np.sum((p - y) ** 2))


def crps(probabilities: Sequence[float], true_bin: int) -> float:
    """CRPS = 1/(K-1) sum_{k=1..K-1} (F(k) - 1[k >= true bin])^2, F the cumulative forecast."""
    p = _probs(probabilities)
    k = p.size
    if not 1 <= true_bin <= k:
        raise ValueError(f"True bin must be within 1..{k}, got {true_bin!r}.")
    cdf = np.cumsum(p)[: k - 1]
    step = (np.arange(1, k) >= true_bin).astype(float)
    return float(np.sum((cdf - step) ** 2) / (k - 1))


def nll(probabilities: Sequence[float], true_bin: int, eps: float = 1e-12) -> float:
    """Negative log-likelihood of the true bin (probability floored at eps)."""
    p = _probs(probabilities)
    _onehot(p.size, true_bin)
    return float(-math.log(max(float(p[true_bin - 1]), eps)))


def predicted_bin(probabilities: Sequence[float]) -> int:
    """The most probable bin (the lowest on a tie)."""
    return int(np.argmax(_probs(probabilities))) + 1


def confidence(probabilities: Sequence[float], kind: str = "max") -> float:
    """Confidence of a forecast in [0, 1].

    max: the largest probability; entropy: 1 - H(p)/log K (normalised negative entropy);
    margin: the gap between the two largest probabilities.
    """
    p = _probs(probabilities)
    if kind == "max":
        return float(np.max(p))
    if kind == "entropy":
        nz = p[p > 0]
        h = float(-np.sum(nz * np.log(nz)))
        return float(min(1.0, max(0.0, 1.0 - h / math.log(p.size))))
    if kind == "margin":
        top = np.sort(p)[::-1]
        return float(top[0] - top[1])
    raise ValueError(f"Unknown confidence kind {kind!r}; use max, entropy or margin.")


def ece(confidences: Sequence[float], correct: Sequence[bool], n_buckets: int = 10) -> float:
    """Expected calibration error over equal-width confidence buckets (first bucket holds 0)."""
    conf = np.asarray(confidences, dtype=float)
    acc = np.asarray(correct, dtype=float)
    if conf.shape != acc.shape:
        raise ValueError("Confidences and correctness flags must have the same length.")
    n = conf.size
    if n == 0:
        return 0.0
    idx = np.clip(np.ceil(conf * n_buckets).astype(int) - 1, 0, n_buckets - 1)
    total = 0.0
    for b in range(n_buckets):
        mask = idx == b
        if mask.any():
            total += mask.sum() / n * abs(acc[mask].mean() - conf[mask].mean())
    return float(total)


def _sorted_cumulative_losses(confidences: Sequence[float], losses: Sequence[float]) -> np.ndarray:
    """Expected cumulative loss after accepting the k most confident forecasts, k = 1..N.

    Forecasts of equal confidence are taken in random order, so within a tie the expected
    cumulative loss grows by the tie's mean loss per item: the curve never depends on input order.
    """
    conf = np.asarray(confidences, dtype=float)
    loss = np.asarray(losses, dtype=float)
    if conf.shape != loss.shape:
        raise ValueError("Confidences and losses must have the same length.")
    order = np.argsort(-conf, kind="stable")
    conf, loss = conf[order], loss[order]
    cum = np.empty(conf.size)
    start, before = 0, 0.0
    while start < conf.size:
        end = start
        while end + 1 < conf.size and conf[end + 1] == conf[start]:
            end += 1
        mean = loss[start : end + 1].mean()
        for i in range(start, end + 1):
            cum[i] = before + (i - start + 1) * mean
        before = cum[end]
        start = end + 1
    return cum


def risk_coverage(confidences: Sequence[float], losses: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Risk–coverage curve: coverage k/N and mean loss among the k most confident, k = 1..N."""
    cum = _sorted_cumulative_losses(confidences, losses)
    k = np.arange(1, cum.size + 1)
    return k / max(cum.size, 1), cum / k


def aurc(confidences: Sequence[float], losses: Sequence[float]) -> float:
    """Area under the risk–coverage curve (mean risk over the N coverage steps)."""
    _, risk = risk_coverage(confidences, losses)
    return float(risk.mean()) if risk.size else 0.0


def risk_at_coverage(confidences: Sequence[float], losses: Sequence[float], coverage: float) -> float:
    """Mean loss among the ceil(coverage * N) most confident forecasts."""
    if not 0 < coverage <= 1:
        raise ValueError("Coverage must be within (0, 1].")
    cum = _sorted_cumulative_losses(confidences, losses)
    if cum.size == 0:
        return 0.0
    k = max(1, math.ceil(coverage * cum.size - 1e-9))
    return float(cum[k - 1] / k)


def recovered_speedup_at_top(
    scores: Sequence[float], speedups: Sequence[float], fraction: float, seed: int = 0
) -> float:
    """Best true speedup among the top fraction ranked by score, over the best true speedup.

    Ties in score are broken at random (seeded) so that the input order never helps a ranking.
    """
    s = np.asarray(scores, dtype=float)
    t = np.asarray(speedups, dtype=float)
    if s.shape != t.shape or s.size == 0:
        raise ValueError("Scores and speedups must be non-empty and of the same length.")
    if not 0 < fraction <= 1:
        raise ValueError("Fraction must be within (0, 1].")
    k = max(1, math.ceil(fraction * s.size - 1e-9))
    tiebreak = np.random.default_rng(seed).permutation(s.size)
    order = np.lexsort((tiebreak, -s))
    return float(t[order[:k]].max() / t.max())


def _valid_answer(probabilities: Sequence[float] | None, k: int | None = None) -> np.ndarray | None:
    if probabilities is None:
        return None
    try:
        p = np.asarray(probabilities, dtype=float)
    except (TypeError, ValueError):
        return None
    if p.ndim != 1 or p.size < 2 or (k is not None and p.size != k):
        return None
    if not np.all(np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-6:
        return None
    return p


def reward(
    kind: str, probabilities: Sequence[float] | None, predicted: int | None, true_bin: int, n_bins: int = 8
) -> float:
    """RL reward for one answer; an unparsable answer (None or invalid probabilities) scores 0.

    correctness = 1[predicted = true]; brier = correctness + (1 - Brier); crps = correctness + (1 - CRPS).
    """
    if kind not in REWARD_KINDS:
        raise ValueError(f"Unknown reward {kind!r}; use one of {', '.join(REWARD_KINDS)}.")
    if predicted is None or not isinstance(predicted, (int, np.integer)) or not 1 <= predicted <= n_bins:
        return 0.0
    correct = 1.0 if int(predicted) == int(true_bin) else 0.0
    if kind == "correctness":
        return correct
    p = _valid_answer(probabilities, n_bins)
    if p is None:
        return 0.0
    if kind == "brier":
        return correct + (1.0 - brier(p, true_bin))
    return correct + (1.0 - crps(p, true_bin))


def reward_correctness(predicted: int | None, true_bin: int, n_bins: int = 8) -> float:
    return reward("correctness", None, predicted, true_bin, n_bins)


def reward_brier(probabilities: Sequence[float] | None, predicted: int | None, true_bin: int) -> float:
    return reward("brier", probabilities, predicted, true_bin, len(probabilities) if probabilities is not None else 8)


def reward_crps(probabilities: Sequence[float] | None, predicted: int | None, true_bin: int) -> float:
    return reward("crps", probabilities, predicted, true_bin, len(probabilities) if probabilities is not None else 8)
