"""Forecasts per second on one core: the learned surrogate, cold and warm, beside a uniform forecast.

  .venv/bin/python benchmarks/surrogate_throughput.py [--families a,b] [--batch 256] [--repeats 2]

Cold: candidates the process has never seen (every feature cache emptied first), which is what a
search forecasts: new children at each expansion. Warm: the same candidates forecast again, their
source features cached. Uniform: the cost of handing out a Forecast of 1/8 per bin, the floor of any
surrogate. The model is trained once on every recorded family (throughput only; no accuracy is
reported here). Forecasts go in batches of --batch, as a search's root screening does.

Each rate is given twice: per second of wall time, and per second of this process's CPU time. On a
shared machine the first also counts the time other processes held the core; the second is what one
core does for the forecasts alone.

Prints a table and writes benchmarks/results/surrogate_throughput_cpu_<date>.json (or --out FILE).
--families, --batch and --repeats are checked before the model is fitted.
"""

from __future__ import annotations

import os

# One core: numpy's and the forest's thread pools stay at one thread, and the process stays on one CPU.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import argparse  # noqa: E402
import datetime as dt  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.search_bench import _requests, cpu_name, named_families, recorded_datasets  # noqa: E402
from search_engine.bins import DEFAULT_BINS  # noqa: E402
from search_engine.surrogates import features  # noqa: E402
from search_engine.surrogates.base import Forecast  # noqa: E402
from search_engine.surrogates.learned import DEFAULT_COMMITTEE, LearnedSurrogate  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT as RANKER_APP_WEIGHT  # noqa: E402


def empty_feature_caches() -> None:
    """Forget every source the process has seen, so the next forecast of each is cold."""
    for name in dir(features):
        function = getattr(features, name)
        if callable(function) and hasattr(function, "cache_clear"):
            function.cache_clear()


def uniform_forecasts(requests) -> list[Forecast]:
    uniform = [1.0 / DEFAULT_BINS.n_bins] * DEFAULT_BINS.n_bins
    return [Forecast.from_probabilities(uniform, surrogate="uniform") for _ in requests]


def rate(forecast, requests, batch: int) -> tuple[float, float]:
    """Forecasts per second of wall time and per second of CPU time."""
    started, cpu_started = time.perf_counter(), time.process_time()
    for i in range(0, len(requests), batch):
        forecast(requests[i:i + batch])
    cpu = max(time.process_time() - cpu_started, 1e-9)
    return len(requests) / (time.perf_counter() - started), len(requests) / cpu


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", default="", help="comma-separated; all recorded families by default")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2, help="timed passes per family; the best is kept")
    parser.add_argument("--ranker-weight", type=float, default=RANKER_APP_WEIGHT,
                        help="the ranking prior's weight (default: the app's, %(default)s; 0: the classifier alone)")
    parser.add_argument("--committee", action=argparse.BooleanOptionalAction, default=DEFAULT_COMMITTEE,
                        help="the recorded-data model as a committee of its calibration folds' models "
                             "(default: the app's, %(default)s)")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    # Checked before the model is fitted on every family (minutes), not found wrong after it.
    for flag, value in (("--batch", args.batch), ("--repeats", args.repeats)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, not {value}")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"surrogate_throughput_cpu_{dt.date.today().isoformat()}.json")
    if out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")

    datasets = recorded_datasets()
    if not datasets:
        raise SystemExit("No recorded families (kernellab/problems/*/records/h200.jsonl.gz) to forecast.")
    wanted = named_families(args.families, datasets, "--families") if args.families else {d.name for d in datasets}
    if not wanted:
        raise SystemExit(f"--families {args.families!r} names no family.")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = [r for d in datasets for r in d.rows]
    started = time.perf_counter()
    model = LearnedSurrogate(seed=0, ranker_weight=args.ranker_weight, committee=args.committee).fit(
        rows, groups=[r["problem_name"] for r in rows])
    fit_s = time.perf_counter() - started

    results = {}
    print(f"{'':23s}{'per second of wall time':^29s}  {'per second of CPU time':^29s}")
    print(f"{'family':14s}{'variants':>9s}" + f"{'cold/s':>9s}{'warm/s':>9s}{'uniform/s':>11s}  " * 2)
    for dataset in [d for d in datasets if d.name in wanted]:
        requests = _requests(dataset.rows)
        runs = {"cold": [], "warm": [], "uniform": []}
        for _ in range(args.repeats):
            empty_feature_caches()
            runs["cold"].append(rate(model.forecast_many, requests, args.batch))
            runs["warm"].append(rate(model.forecast_many, requests, args.batch))
            runs["uniform"].append(rate(uniform_forecasts, requests, args.batch))
        results[dataset.name] = {"variants": len(requests)}
        for kind, measured in runs.items():
            results[dataset.name] |= {f"{kind}_forecasts_per_s": max(w for w, _ in measured),
                                      f"{kind}_forecasts_per_cpu_s": max(c for _, c in measured)}
        for kind, measured in runs.items():
            results[dataset.name] |= {f"{kind}_runs": [w for w, _ in measured],
                                      f"{kind}_runs_per_cpu_s": [c for _, c in measured]}
        r = results[dataset.name]
        print(f"{dataset.name:14s}{len(requests):9d}" + "".join(
            f"{r[f'cold_forecasts_{u}']:9.0f}{r[f'warm_forecasts_{u}']:9.0f}{r[f'uniform_forecasts_{u}']:11.0f}  "
            for u in ("per_s", "per_cpu_s")), flush=True)

    cold_all = [r["cold_forecasts_per_s"] for r in results.values()]
    warm_all = [r["warm_forecasts_per_s"] for r in results.values()]
    cold_cpu = [r["cold_forecasts_per_cpu_s"] for r in results.values()]
    warm_cpu = [r["warm_forecasts_per_cpu_s"] for r in results.values()]
    output = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_name(), "cores_used": 1, "python": platform.python_version(),
        "data": "recorded H200 (kernellab/problems/*/records/h200.jsonl.gz); every ok variant of each family",
        "model": {"surrogate": model.id, "train_rows": len(rows), "fit_s": fit_s, "ranker_weight": args.ranker_weight,
                  "committee": args.committee, "note": "trained on every family: throughput only, no accuracy"},
        "batch": args.batch, "repeats": args.repeats,
        # The machine is shared: a load above its core count slows every figure here.
        "load_average_1_5_15": list(os.getloadavg()), "machine_cores": os.cpu_count(),
        "cold_forecasts_per_s": min(cold_all), "cold_forecasts_per_s_median": statistics.median(cold_all),
        "warm_forecasts_per_s": min(warm_all), "warm_forecasts_per_s_median": statistics.median(warm_all),
        "cold_forecasts_per_cpu_s": min(cold_cpu), "cold_forecasts_per_cpu_s_median": statistics.median(cold_cpu),
        "warm_forecasts_per_cpu_s": min(warm_cpu), "warm_forecasts_per_cpu_s_median": statistics.median(warm_cpu),
        "families": results,
    }
    print(f"slowest family: cold {min(cold_all):.0f}/s, warm {min(warm_all):.0f}/s "
          f"(medians {statistics.median(cold_all):.0f}/s and {statistics.median(warm_all):.0f}/s) of wall time; "
          f"cold {min(cold_cpu):.0f}/s, warm {min(warm_cpu):.0f}/s (medians {statistics.median(cold_cpu):.0f}/s and "
          f"{statistics.median(warm_cpu):.0f}/s) of CPU time")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(output, indent=1))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    return output


if __name__ == "__main__":
    main()
