"""Protocols that turn a surrogate and a dataset into a report: plain, with a calibration split, and
leave-one-problem-out for surrogates that learn (with nested leave-one-problem-out calibration)."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Callable

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.lab import recalibration
from search_engine.lab.datasets import row_problem, row_request, training_rows
from search_engine.lab.discovery import discovery_report
from search_engine.lab.evaluation import ForecastProgress, cost_summary, evaluate, run_forecasts
from search_engine.surrogates.base import Forecast

Progress = Callable[[ForecastProgress], None]


def dataset_summary(name: str, rows: list[dict], path: str = "") -> dict:
    digest = hashlib.sha256()
    for row in rows:
        digest.update(str(row.get("comparison_id") or row.get("pair_id")).encode())
        digest.update(repr(row.get("aggregated_speedup") or row.get("g_speedup")).encode())
    return {
        "name": name, "path": path, "rows": len(rows),
        "problems": dict(sorted(Counter(row_problem(r) for r in rows).items())),
        "sources": dict(Counter(r.get("source", "") for r in rows)),
        "hardware": dict(Counter(r.get("hardware", "") for r in rows)),
        "fingerprint": digest.hexdigest()[:16],
    }


def forecast_rows(surrogate, rows: list[dict], *, batch_size: int = 32, progress: Progress | None = None
                  ) -> list[Forecast]:
    return run_forecasts(surrogate, [row_request(r) for r in rows], batch_size=batch_size, progress=progress)


def recalibration_block(calibration_forecasts: list[Forecast], calibration_rows: list[dict],
                        test_forecasts: list[Forecast], test_rows: list[dict], methods: tuple[str, ...],
                        bins: BinTable = DEFAULT_BINS) -> dict:
    """Fit each method on the calibration split, report the test split after it."""
    true = [int(r["true_bin"]) for r in calibration_rows]
    out = {"calibration_rows": len(calibration_rows), "test_rows": len(test_rows), "methods": {}}
    for method in methods:
        model = recalibration.fit_on_forecasts(method, calibration_forecasts, true)
        after = recalibration.apply_to_forecasts(model, test_forecasts)
        out["methods"][method] = {"params": _params(model), "evaluation": evaluate(after, test_rows, bins=bins)}
    return out


def _params(model) -> dict:
    data = model.to_dict()
    if data["method"] == "isotonic":
        return {"method": "isotonic", "floor": data["floor"], "knots": sum(len(x) for x, _ in data["maps"])}
    return data


def loo_forecasts(rows: list[dict], make_surrogate: Callable[[], object], *, progress: Callable[[str], None] | None = None
                  ) -> list[Forecast]:
    """Leave one problem out: each problem's rows forecast by a surrogate trained on all other problems."""
    problems = sorted({row_problem(r) for r in rows})
    if len(problems) < 2:
        raise ValueError("Leave-one-problem-out needs rows of at least two problems.")
    out: list[Forecast | None] = [None] * len(rows)
    for name in problems:
        train = [r for r in rows if row_problem(r) != name]
        test_idx = [i for i, r in enumerate(rows) if row_problem(r) == name]
        started = time.monotonic()
        surrogate = make_surrogate()
        surrogate.fit(training_rows(train), groups=[row_problem(r) for r in train])
        forecasts = surrogate.forecast_many([row_request(rows[i]) for i in test_idx])
        for i, f in zip(test_idx, forecasts):
            out[i] = f
        if progress:
            progress(f"held out {name}: trained on {len(train)} rows, forecast {len(test_idx)} "
                     f"in {time.monotonic() - started:.1f} s")
    return out  # type: ignore[return-value]


def loo_recalibrated(rows: list[dict], make_surrogate: Callable[[], object], outer: list[Forecast],
                     methods: tuple[str, ...], *, progress: Callable[[str], None] | None = None,
                     bins: BinTable = DEFAULT_BINS) -> dict:
    """Nested calibration: for each held-out problem, the recalibration is fitted on leave-one-problem-out
    forecasts of the *other* problems (each by a model that never saw its problem), then applied to the
    held-out problem's forecasts. No held-out row ever informs its own calibration."""
    problems = sorted({row_problem(r) for r in rows})
    after = {m: list(outer) for m in methods}
    params = {m: {} for m in methods}
    for name in problems:
        inner_rows = [r for r in rows if row_problem(r) != name]
        if len({row_problem(r) for r in inner_rows}) < 2:
            raise ValueError("Nested calibration needs at least three problems.")
        inner = loo_forecasts(inner_rows, make_surrogate)
        test_idx = [i for i, r in enumerate(rows) if row_problem(r) == name]
        for method in methods:
            model = recalibration.fit_on_forecasts(method, inner, [int(r["true_bin"]) for r in inner_rows])
            fixed = recalibration.apply_to_forecasts(model, [outer[i] for i in test_idx])
            for i, f in zip(test_idx, fixed):
                after[method][i] = f
            params[method][name] = _params(model)
        if progress:
            progress(f"calibrated the forecasts of {name} on {len(inner_rows)} rows of the other problems")
    return {
        "calibration": "nested leave-one-problem-out (fitted on the other problems' held-out forecasts)",
        "calibration_rows": len(rows), "test_rows": len(rows),
        "methods": {m: {"params": params[m], "evaluation": evaluate(after[m], rows, bins=bins)} for m in methods},
    }


def new_report(*, title: str, surrogate: dict, dataset: dict, protocol: str, evaluation: dict, cost: dict,
               recalibration_result: dict | None = None, discovery: dict | None = None, command: str = "") -> dict:
    return {
        "title": title, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "surrogate": surrogate, "dataset": dataset, "protocol": protocol, "evaluation": evaluation,
        "recalibration": recalibration_result, "discovery": discovery, "cost": cost, "command": command,
    }


def discovery_block(surrogate, pairs: list[dict], *, batch_size: int = 32, progress: Progress | None = None,
                    forecasts: list[Forecast] | None = None, bins: BinTable = DEFAULT_BINS) -> tuple[dict, list[Forecast]]:
    forecasts = forecasts if forecasts is not None else forecast_rows(surrogate, pairs, batch_size=batch_size,
                                                                      progress=progress)
    report = discovery_report(forecasts, pairs, bins=bins)
    report["evaluation"] = evaluate(forecasts, pairs, bins=bins)
    return report, forecasts


__all__ = ["dataset_summary", "forecast_rows", "recalibration_block", "loo_forecasts", "loo_recalibrated",
           "new_report", "discovery_block", "cost_summary"]
