"""Scoring a surrogate on the held-out tasks (search_engine/heldout.py) the way a search uses it.

Rows are program rows (search_engine/lab/program_rows.py): a pool is one task on one GPU, what one
run chooses among; a row without a speedup (failed build, wrong answer, guard) is a miss, ranked by
the surrogate like any candidate and worth nothing when chosen.

- spearman_within_task: Spearman's rho of the forecast (expected log speedup) against the measured
  speedup over each task's rows (every GPU; misses as the lowest speedup), averaged over tasks;
- recovered_at_1pct: per pool of two or more candidates, the best measured speedup among the top 1%
  of the forecast's order (at least one candidate) over the pool's best, averaged over pools; the
  random order's expectation on the same pools beside it;
- brier / crps: cold forecasts (no measurement of the run) of the rows with a speedup, beside a
  uniform forecast and the roofline heuristic's;
- ece_after_first_measurement: each pool replayed as a run: the candidate the forecast ranks first is
  measured (a miss is measured and the next taken, as a search would), the surrogate learns from it
  (`learn`, where it has one), and the pool's other rows are forecast again and scored;
- cold_forecasts_per_s: forecasts of the held-out rows, pool by pool, on one thread, every cache
  emptied first and the candidates' again before each pool (a run reads its reference once and every
  candidate anew), per second of the process's CPU time (one core's rate on a shared machine);
  cold_forecasts_per_s_wall beside it, with the machine's load average. One pass over a few hundred
  rows takes a fifth of a second, and on the 2-core development machine two such passes moved by 12%
  (1,673 and 1,878/s, 2026-12-05), so `throughput_passes` times the cold pass again (caches emptied
  each time, the first pass's forecasts scored) and reports the median, every pass beside it.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from typing import Callable

import numpy as np
from scipy.stats import spearmanr

from search_engine import scoring
from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.heldout import is_held_out
from search_engine.lab.program_rows import pools
from search_engine.surrogates.base import Forecast

TOP_FRACTION = 0.01
RANDOM_DRAWS = 1000
HEADLINE = ("tasks", "rows", "spearman_within_task", "recovered_at_1pct", "random_at_1pct", "brier",
            "brier_uniform", "brier_roofline", "crps", "crps_uniform", "crps_roofline", "ece_after_first_measurement",
            "cold_forecasts_per_s")


def split_heldout(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(training rows: tasks outside the held-out set, test rows: tasks inside it)."""
    train = [r for r in rows if not is_held_out(r["task"])]
    test = [r for r in rows if is_held_out(r["task"])]
    return train, test


def limit_pools(rows: list[dict], limit: int) -> list[dict]:
    """Whole pools, in task order, while they fit in `limit` rows (at least one pool): a smaller
    sample that keeps every pool's ranking intact."""
    kept: list[int] = []
    for _, idx in sorted(pools(rows).items()):
        if kept and len(kept) + len(idx) > limit:
            break
        kept.extend(idx)
    return [rows[i] for i in sorted(kept)]


def _speedup(row: dict) -> float | None:
    s = row.get("speedup")
    return float(s) if isinstance(s, (int, float)) and math.isfinite(s) and s > 0 else None


def _score(forecast: Forecast, bins: BinTable) -> float:
    value = forecast.expected_log_speedup(bins)
    return -1e9 if value is None else float(value)


def ranking_block(forecasts: list[Forecast], rows: list[dict], *, bins: BinTable = DEFAULT_BINS,
                  seed: int = 0) -> dict:
    """Spearman within task and recovered speedup at the top 1% (beside a random order)."""
    scores = np.array([_score(f, bins) for f in forecasts])
    truth = np.array([_speedup(r) or 0.0 for r in rows])
    by_task: dict = {}
    for i, row in enumerate(rows):
        by_task.setdefault(row["task"], []).append(i)
    rhos, skipped = {}, 0
    for task, idx in sorted(by_task.items()):
        t = truth[idx]
        if len(idx) < 3 or np.ptp(t) == 0:
            skipped += 1
            continue
        s = scores[idx]
        rho = 0.0 if np.ptp(s) == 0 else float(spearmanr(s, t).statistic)
        rhos[task] = rho if math.isfinite(rho) else 0.0
    rng = np.random.default_rng(seed)
    ours, chance, pool_sizes = [], [], []
    misses_chosen = 0
    for key, idx in sorted(pools(rows).items()):
        t = truth[idx]
        if len(idx) < 2 or t.max() <= 0:
            continue
        got = scoring.recovered_speedup_at_top(scores[idx], t, TOP_FRACTION, seed=seed)
        ours.append(got)
        misses_chosen += int(got == 0)
        k = max(1, math.ceil(TOP_FRACTION * len(idx) - 1e-9))
        draws = [t[rng.permutation(len(idx))[:k]].max() / t.max() for _ in range(RANDOM_DRAWS)]
        chance.append(float(np.mean(draws)))
        pool_sizes.append(len(idx))
    return {
        "spearman_within_task": float(np.mean(list(rhos.values()))) if rhos else None,
        "spearman_tasks": len(rhos), "spearman_tasks_skipped": skipped,
        "spearman_by_task": rhos,
        "recovered_at_1pct": float(np.mean(ours)) if ours else None,
        "random_at_1pct": float(np.mean(chance)) if chance else None,
        "pools": len(ours), "pool_size_median": float(np.median(pool_sizes)) if pool_sizes else None,
        "misses_chosen_first": misses_chosen,
    }


def _scored_pairs(forecasts: list[Forecast], rows: list[dict], bins: BinTable) -> list[tuple]:
    """(probabilities, measured bin) of the rows with a speedup and an answered forecast."""
    return [(f.probabilities, bins.bin_of(_speedup(r))) for f, r in zip(forecasts, rows)
            if _speedup(r) is not None and not f.abstained and f.probabilities]


def calibration_pairs(forecasts: list[Forecast], rows: list[dict],
                      bins: BinTable = DEFAULT_BINS) -> tuple[list[float], list[bool]]:
    """The confidences and whether the forecast bin was right, over the rows probability_block scores (for an
    ECE over several blocks' rows together)."""
    return _confidence_and_correct(_scored_pairs(forecasts, rows, bins))


def _confidence_and_correct(pairs: list[tuple]) -> tuple[list[float], list[bool]]:
    return [scoring.confidence(p) for p, _ in pairs], [bool(scoring.predicted_bin(p) == t) for p, t in pairs]


def probability_block(forecasts: list[Forecast], rows: list[dict], bins: BinTable = DEFAULT_BINS) -> dict:
    """Brier, CRPS, NLL and ECE over the rows with a speedup and an answered forecast."""
    pairs = _scored_pairs(forecasts, rows, bins)
    if not pairs:
        return {"rows": 0}
    conf, correct = _confidence_and_correct(pairs)
    return {
        "rows": len(pairs),
        "brier": float(np.mean([scoring.brier(p, t) for p, t in pairs])),
        "crps": float(np.mean([scoring.crps(p, t) for p, t in pairs])),
        "nll": float(np.mean([scoring.nll(p, t) for p, t in pairs])),
        "ece": scoring.ece(conf, correct),
        "accuracy": float(np.mean(correct)),
        "mean_confidence": float(np.mean(conf)),
    }


def uniform_forecasts(n: int, bins: BinTable = DEFAULT_BINS) -> list[Forecast]:
    return [Forecast.from_probabilities([1.0] * bins.n_bins, surrogate="uniform") for _ in range(n)]


def after_measurements(surrogate, rows: list[dict], cold: list[Forecast], *, measured: int = 1,
                       bins: BinTable = DEFAULT_BINS) -> tuple[list[Forecast], list[dict], dict]:
    """Each pool replayed as a run that measures its first `measured` candidates in the forecast's
    order (misses measured too, and the next one taken); the surrogate learns from them where it can
    (`learn`), then its forecasts of the pool's other rows. Returns (forecasts, their rows, counts)."""
    learns = hasattr(surrogate, "learn")
    out_f, out_r = [], []
    pools_used = misses_measured = 0
    for _, idx in sorted(pools(rows).items()):
        order = sorted(idx, key=lambda i: -_score(cold[i], bins))
        taken, measured_rows = [], []
        for i in order:
            taken.append(i)
            if _speedup(rows[i]) is None:
                misses_measured += 1
                continue
            measured_rows.append(rows[i])
            if len(measured_rows) == measured:
                break
        rest = [i for i in idx if i not in taken]
        if len(measured_rows) < measured or not any(_speedup(rows[i]) for i in rest):
            continue
        pools_used += 1
        if learns:
            surrogate.learn([{"request": r["request"], "speedup": _speedup(r)} for r in measured_rows])
            forecasts = surrogate.forecast_many([rows[i]["request"] for i in rest])
            surrogate.learn([])
        else:
            forecasts = [cold[i] for i in rest]
        out_f.extend(forecasts)
        out_r.extend(rows[i] for i in rest)
    return out_f, out_r, {"pools": pools_used, "misses_measured": misses_measured, "learns": learns}


def forecast_pools(surrogate, rows: list[dict], *, clear: Callable[[], None] | None = None,
                   clear_pool: Callable[[], None] | None = None, batch_size: int = 64) -> tuple[list[Forecast], dict]:
    """Cold forecasts of every row, pool by pool (a run forecasts its own problem's candidates), after
    `clear()` empties every cache and `clear_pool()` the candidates' before each pool (the same
    program on another GPU is new to that run); returns them in row order with the forecasts per second
    of wall-clock time and per second of the process's CPU time (one thread: what one core gives,
    whatever else the machine runs)."""
    if clear is not None:
        clear()
    out: list = [None] * len(rows)
    started, cpu = time.perf_counter(), time.process_time()
    for _, idx in sorted(pools(rows).items()):
        if clear_pool is not None:
            clear_pool()
        for start in range(0, len(idx), batch_size):
            chunk = idx[start:start + batch_size]
            for i, f in zip(chunk, surrogate.forecast_many([rows[i]["request"] for i in chunk])):
                out[i] = f
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    rates = {"wall": len(rows) / elapsed if elapsed > 0 else float("inf"),
             "cpu": len(rows) / cpu if cpu > 0 else float("inf")}
    return out, rates


def heldout_report(surrogate, rows: list[dict], *, roofline=None, clear: Callable[[], None] | None = None,
                   clear_pool: Callable[[], None] | None = None, bins: BinTable = DEFAULT_BINS, seed: int = 0,
                   batch_size: int = 64, throughput_passes: int = 1) -> dict:
    """The held-out figures of one surrogate on held-out rows (every row must be of a held-out task).

    `throughput_passes` > 1 times the cold pass that many times in all (each after `clear()`, which must be
    given: a pass that reads cached forecasts is not cold) and reports the median rates; an LLM surrogate's
    passes would each pay for its calls, so the default is the one pass that is scored."""
    if throughput_passes > 1 and clear is None:
        raise ValueError("Timing the cold pass again needs `clear`, which empties the surrogate's caches.")
    outside = sorted({r["task"] for r in rows if not is_held_out(r["task"])})
    if outside:
        raise ValueError(f"{', '.join(outside[:3])} are not held-out tasks; this report scores held-out tasks only.")
    if not rows:
        raise ValueError("There are no held-out rows to score.")
    if hasattr(surrogate, "learn"):
        surrogate.learn([])
    cold, per_s = forecast_pools(surrogate, rows, clear=clear, clear_pool=clear_pool, batch_size=batch_size)
    passes = [per_s]
    for _ in range(throughput_passes - 1):
        passes.append(forecast_pools(surrogate, rows, clear=clear, clear_pool=clear_pool, batch_size=batch_size)[1])
    per_s = {key: float(np.median([p[key] for p in passes])) for key in ("wall", "cpu")}
    ranking = ranking_block(cold, rows, bins=bins, seed=seed)
    probability = probability_block(cold, rows, bins)
    uniform = probability_block(uniform_forecasts(len(rows), bins), rows, bins)
    report = {
        "tasks": len({r["task"] for r in rows}), "rows": len(rows),
        "rows_with_speedup": sum(1 for r in rows if _speedup(r) is not None),
        "misses": sum(1 for r in rows if _speedup(r) is None),
        "abstained": sum(1 for f in cold if f.abstained),
        "abstain_reasons": dict(Counter(f.abstain_reason[:160] for f in cold if f.abstained).most_common(5)),
        **{k: ranking[k] for k in ("spearman_within_task", "recovered_at_1pct", "random_at_1pct")},
        "brier": probability.get("brier"), "brier_uniform": uniform.get("brier"),
        "crps": probability.get("crps"), "crps_uniform": uniform.get("crps"),
        "cold_forecasts_per_s": per_s["cpu"], "cold_forecasts_per_s_wall": per_s["wall"],
        "cold_forecasts_per_s_passes": [round(p["cpu"], 1) for p in passes],
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cost": {"tokens_in": sum(f.tokens_in for f in cold), "tokens_out": sum(f.tokens_out for f in cold),
                 "cached": sum(1 for f in cold if f.cached)},
        "ranking": ranking, "cold": probability, "uniform": uniform,
    }
    if roofline is not None:
        roof, _ = forecast_pools(roofline, rows, batch_size=batch_size)
        roof_block = probability_block(roof, rows, bins)
        report.update({"brier_roofline": roof_block.get("brier"), "crps_roofline": roof_block.get("crps"),
                       "roofline": roof_block, "roofline_ranking": ranking_block(roof, rows, bins=bins, seed=seed)})
    for n in (1, 2):
        forecasts, kept, counts = after_measurements(surrogate, rows, cold, measured=n, bins=bins)
        block = probability_block(forecasts, kept, bins)
        report[f"after_{n}_measured"] = {**block, **counts}
    report["ece_after_first_measurement"] = report["after_1_measured"].get("ece")
    return report
