"""Evaluating a surrogate on a dataset: forecasts with progress and cost, then one report.

The report is a plain dict (saved as JSON, printed as a table, drawn in the browser): exact and ±1
accuracy, Brier, CRPS, NLL, ECE, AURC, risk at coverage and recovered speedup at top-k% (all from
search_engine.scoring), the reliability buckets, the risk–coverage curve, the confusion matrix, a
per-problem breakdown, and reference figures (a uniform forecast, the majority bin, a random ranking).

Probability scores are over the answered forecasts; an abstention counts in `abstained` and ranks
last when recovered speedup is computed over every row.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from search_engine import scoring
from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.lab.datasets import row_problem, row_speedup
from search_engine.surrogates.base import Forecast, ForecastRequest

COVERAGES = (0.1, 0.25, 0.5, 0.8, 1.0)
TOP_FRACTIONS = (0.01, 0.05, 0.1, 0.25)
RANDOM_RANKINGS = 200


@dataclass
class ForecastProgress:
    done: int
    total: int
    cached: int
    abstained: int
    tokens_in: int
    tokens_out: int
    elapsed_s: float

    def line(self) -> str:
        rate = self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        parts = [f"forecast {self.done}/{self.total}", f"{rate:.1f}/s"]
        if self.done < self.total and math.isfinite(left):
            parts.append(f"about {left:.0f} s left")
        if self.cached:
            parts.append(f"{self.cached} cached")
        if self.abstained:
            parts.append(f"{self.abstained} abstained")
        if self.tokens_in or self.tokens_out:
            parts.append(f"tokens {self.tokens_in} in / {self.tokens_out} out")
        return ", ".join(parts)


def run_forecasts(surrogate, requests: list[ForecastRequest], *, batch_size: int = 32,
                  progress: Callable[[ForecastProgress], None] | None = None) -> list[Forecast]:
    """forecast_many in batches (the LLM surrogate spreads each batch over its concurrency)."""
    started = time.monotonic()
    out: list[Forecast] = []
    tokens_in = tokens_out = cached = abstained = 0
    for start in range(0, len(requests), max(1, batch_size)):
        batch = surrogate.forecast_many(requests[start:start + batch_size])
        out.extend(batch)
        for f in batch:
            tokens_in += f.tokens_in
            tokens_out += f.tokens_out
            cached += bool(f.cached)
            abstained += bool(f.abstained)
        if progress is not None:
            progress(ForecastProgress(len(out), len(requests), cached, abstained, tokens_in, tokens_out,
                                      time.monotonic() - started))
    return out


def cost_summary(forecasts: list[Forecast], *, wall_s: float | None = None, price_in_per_mtok: float | None = None,
                 price_out_per_mtok: float | None = None) -> dict:
    """Tokens, latency and (with prices in dollars per million tokens) the bill; cached answers cost nothing."""
    tokens_in = sum(f.tokens_in for f in forecasts if not f.cached)
    tokens_out = sum(f.tokens_out for f in forecasts if not f.cached)
    latencies = [f.latency_s for f in forecasts if not f.cached]
    usd = None
    if price_in_per_mtok is not None or price_out_per_mtok is not None:
        usd = (tokens_in * (price_in_per_mtok or 0.0) + tokens_out * (price_out_per_mtok or 0.0)) / 1e6
    return {
        "forecasts": len(forecasts), "cached": sum(1 for f in forecasts if f.cached),
        "tokens_in": tokens_in, "tokens_out": tokens_out,
        "latency_mean_s": float(np.mean(latencies)) if latencies else 0.0,
        "latency_p95_s": float(np.percentile(latencies, 95)) if latencies else 0.0,
        "wall_s": wall_s, "usd": usd, "price_in_per_mtok": price_in_per_mtok,
        "price_out_per_mtok": price_out_per_mtok,
    }


def _score_block(probabilities: np.ndarray, true_bins: np.ndarray, bins: BinTable) -> dict:
    if len(true_bins) == 0:
        return {}
    predicted = np.array([scoring.predicted_bin(p) for p in probabilities])
    confidence = np.array([scoring.confidence(p) for p in probabilities])
    correct = predicted == true_bins
    losses = (~correct).astype(float)
    return {
        "exact_accuracy": float(correct.mean()),
        "within_one_accuracy": float((np.abs(predicted - true_bins) <= 1).mean()),
        "brier": float(np.mean([scoring.brier(p, t) for p, t in zip(probabilities, true_bins)])),
        "crps": float(np.mean([scoring.crps(p, t) for p, t in zip(probabilities, true_bins)])),
        "nll": float(np.mean([scoring.nll(p, t) for p, t in zip(probabilities, true_bins)])),
        "ece": scoring.ece(confidence, correct),
        "aurc": scoring.aurc(confidence, losses),
        "mean_confidence": float(confidence.mean()),
        "risk_at_coverage": {f"{c:g}": scoring.risk_at_coverage(confidence, losses, c) for c in COVERAGES},
    }


def _reliability(probabilities: np.ndarray, true_bins: np.ndarray, n_buckets: int = 10) -> list[dict]:
    """The ECE buckets (same bucketing as scoring.ece): mean confidence and accuracy per bucket."""
    if len(true_bins) == 0:
        return []
    confidence = np.array([scoring.confidence(p) for p in probabilities])
    correct = np.array([scoring.predicted_bin(p) for p in probabilities]) == true_bins
    idx = np.clip(np.ceil(confidence * n_buckets).astype(int) - 1, 0, n_buckets - 1)
    out = []
    for b in range(n_buckets):
        mask = idx == b
        out.append({"lo": b / n_buckets, "hi": (b + 1) / n_buckets, "count": int(mask.sum()),
                    "confidence": float(confidence[mask].mean()) if mask.any() else None,
                    "accuracy": float(correct[mask].mean()) if mask.any() else None})
    return out


def _risk_curve(probabilities: np.ndarray, true_bins: np.ndarray, max_points: int = 200) -> dict:
    if len(true_bins) == 0:
        return {"coverage": [], "risk": []}
    confidence = [scoring.confidence(p) for p in probabilities]
    losses = [0.0 if scoring.predicted_bin(p) == t else 1.0 for p, t in zip(probabilities, true_bins)]
    coverage, risk = scoring.risk_coverage(confidence, losses)
    if coverage.size > max_points:
        keep = np.unique(np.linspace(0, coverage.size - 1, max_points).round().astype(int))
        coverage, risk = coverage[keep], risk[keep]
    return {"coverage": [float(c) for c in coverage], "risk": [float(r) for r in risk]}


def _recovered(forecasts: list[Forecast], speedups: np.ndarray, problems: list[str], bins: BinTable,
               seed: int = 0) -> dict:
    """Recovered speedup at top-k% within each problem's pool, averaged over problems; and a random ranking."""
    scores = np.array([f.expected_log_speedup(bins) if not f.abstained and f.probabilities else -np.inf
                       for f in forecasts], dtype=float)
    scores[~np.isfinite(scores)] = -1e9
    by_problem: dict[str, list[int]] = {}
    for i, p in enumerate(problems):
        by_problem.setdefault(p, []).append(i)
    rng = np.random.default_rng(seed)
    surrogate_at, random_at = {}, {}
    for fraction in TOP_FRACTIONS:
        ours, chance = [], []
        for idx in by_problem.values():
            idx = np.array(idx)
            ours.append(scoring.recovered_speedup_at_top(scores[idx], speedups[idx], fraction, seed=seed))
            draws = [scoring.recovered_speedup_at_top(rng.random(idx.size), speedups[idx], fraction, seed=seed)
                     for _ in range(RANDOM_RANKINGS)]
            chance.append(float(np.mean(draws)))
        surrogate_at[f"{fraction:g}"] = float(np.mean(ours))
        random_at[f"{fraction:g}"] = float(np.mean(chance))
    return {"surrogate": surrogate_at, "random": random_at, "pools": len(by_problem)}


def evaluate(forecasts: list[Forecast], rows: list[dict], *, bins: BinTable = DEFAULT_BINS, seed: int = 0) -> dict:
    """The evaluation block of a report for forecasts aligned with dataset rows."""
    if len(forecasts) != len(rows):
        raise ValueError("There must be one forecast per dataset row.")
    if not rows:
        raise ValueError("An evaluation needs at least one row.")
    k = bins.n_bins
    true_all = np.array([int(r["true_bin"]) for r in rows])
    speedups = np.array([row_speedup(r) for r in rows])
    problems = [row_problem(r) for r in rows]
    answered = [i for i, f in enumerate(forecasts) if not f.abstained and f.probabilities]
    probabilities = np.array([forecasts[i].probabilities for i in answered], dtype=float).reshape(-1, k)
    true = true_all[answered]
    predicted = np.array([scoring.predicted_bin(p) for p in probabilities], dtype=int)
    confusion = np.zeros((k, k), dtype=int)
    for t, p in zip(true, predicted):
        confusion[t - 1, p - 1] += 1
    per_problem = {}
    for name in sorted(set(problems)):
        idx = [j for j, i in enumerate(answered) if problems[i] == name]
        block = _score_block(probabilities[idx], true[idx], bins) if idx else {}
        per_problem[name] = {
            "rows": sum(1 for p in problems if p == name), "answered": len(idx),
            **{key: block.get(key) for key in ("exact_accuracy", "within_one_accuracy", "brier", "crps", "ece")},
        }
    counts = Counter(int(t) for t in true_all)
    majority = max(range(1, k + 1), key=lambda b: (counts.get(b, 0), -b))
    uniform = np.full((len(true_all), k), 1.0 / k)
    abstain_reasons = Counter(re.split(r"(?<=\.)\s", f.abstain_reason.strip())[0][:160] for f in forecasts if f.abstained)
    return {
        "rows": len(rows), "answered": len(answered), "abstained": len(rows) - len(answered),
        "abstain_reasons": dict(abstain_reasons.most_common(8)),
        "metrics": _score_block(probabilities, true, bins),
        "reliability": _reliability(probabilities, true),
        "risk_coverage": _risk_curve(probabilities, true),
        "confusion": confusion.tolist(),
        "true_bin_counts": [counts.get(b, 0) for b in range(1, k + 1)],
        "predicted_bin_counts": [int((predicted == b).sum()) for b in range(1, k + 1)],
        "recovered_speedup": _recovered(forecasts, speedups, problems, bins, seed),
        "per_problem": per_problem,
        "reference_scores": {
            "uniform": {key: v for key, v in _score_block(uniform, true_all, bins).items()
                        if key in ("brier", "crps", "nll")},
            "majority_bin": majority,
            "majority_accuracy": counts.get(majority, 0) / len(true_all),
        },
    }


# ---- printing ----------------------------------------------------------------------------------

METRIC_ROWS = (
    ("exact_accuracy", "exact accuracy", True),
    ("within_one_accuracy", "±1 accuracy", True),
    ("brier", "Brier", False),
    ("crps", "CRPS", False),
    ("nll", "NLL", False),
    ("ece", "ECE", False),
    ("aurc", "AURC", False),
    ("mean_confidence", "mean confidence", None),
)


def metric_lines(evaluation: dict) -> list[tuple[str, float | None]]:
    """(label, value) rows of one evaluation block, in the order every table shows them."""
    m = evaluation.get("metrics") or {}
    lines = [(label, m.get(key)) for key, label, _ in METRIC_ROWS]
    for c, v in (m.get("risk_at_coverage") or {}).items():
        lines.append((f"risk @ {float(c):.0%} coverage", v))
    rec = evaluation.get("recovered_speedup") or {}
    for frac, v in (rec.get("surrogate") or {}).items():
        lines.append((f"recovered speedup @ top {float(frac):.0%}", v))
    for frac, v in (rec.get("random") or {}).items():
        lines.append((f"  random ranking @ top {float(frac):.0%}", v))
    return lines


def format_table(columns: list[tuple[str, dict]]) -> str:
    """A plain-text table: one column per (title, evaluation block)."""
    if not columns:
        return ""
    labels = [label for label, _ in metric_lines(columns[0][1])]
    values = [dict(metric_lines(block)) for _, block in columns]
    width = max(len(label) for label in labels + ["rows (answered)"]) + 2
    col = max(12, *(len(title) + 2 for title, _ in columns))
    out = ["".ljust(width) + "".join(title.rjust(col) for title, _ in columns)]
    out.append("rows (answered)".ljust(width) + "".join(
        f"{block['rows']} ({block['answered']})".rjust(col) for _, block in columns))
    for label in labels:
        cells = []
        for v in values:
            x = v.get(label)
            cells.append(("—" if x is None else f"{x:.3f}").rjust(col))
        out.append(label.ljust(width) + "".join(cells))
    return "\n".join(out)
