"""The honest 8-family verdicts of several search benchmark runs that differ only in the surrogate's
model seed, each on its own and with their runs pooled (issue 20; the fourth validation protocol,
benchmarks/results/search_cpu_2026-12-03_validation-protocol-4.txt).

    .venv/bin/python benchmarks/probes/cpu_2026-12-03/pool_model_seeds.py --name LABEL RUN.json [RUN.json ...] \
        [--out FILE.json]

Each run's verdicts are the ones benchmarks/search_bench.py wrote into its JSON. Pooled: the surrogate
PUCT's runs of every file together (ten search seeds per model seed, a missed run counted as the budget),
judged against the baselines by search_bench.report_verdicts, resampling included. The baselines do not
depend on the model seed: every file must hold the same ones, or the pooling is refused. A family passes
when the surrogate needs 3x fewer measurements than measure-all AND fewer than the best Kernel Tuner
strategy.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import search_bench as sb  # noqa: E402

SURROGATE_METHODS = ("puct_surrogate", "puct_surrogate_unscreened")


def baselines(run: dict) -> dict:
    return {family: {m: r["values"] for m, r in methods.items() if m not in SURROGATE_METHODS}
            for family, methods in run["search"].items()}


def pooled_search(runs: list[dict]) -> dict:
    """The first run's results with each surrogate method's runs replaced by those of every run together."""
    search = copy.deepcopy(runs[0]["search"])
    for family, methods in search.items():
        for method in SURROGATE_METHODS:
            if method not in methods:
                continue
            values, per_run = [], {"compile_checks": [], "estimated_wall_s": []}
            for run in runs:
                summary = run["search"][family][method]
                values += [None if i in summary["missed_runs"] else v for i, v in enumerate(summary["values"])]
                for key, pooled in per_run.items():
                    pooled += summary.get(key) or []
            methods[method] = sb.summarise(values, methods[method]["budget"])
            # what each run cost beside its measurements, where every file kept it per run
            for key, pooled in per_run.items():
                if len(pooled) == len(values):
                    methods[method] |= {key: pooled, f"{key}_median": statistics.median(pooled)}
    return search


def passes(verdicts: dict) -> dict:
    """Per statistic, the families that pass both criteria."""
    return {statistic: sorted(f for f, v in verdicts.items()
                              if (v[statistic]["measure_all_over_surrogate"] or 0) >= 3
                              and (v[statistic]["best_kt_over_surrogate"] or 0) > 1)
            for statistic in ("median", "mean")}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = [json.loads(p.read_text()) for p in args.runs]
    if any(baselines(r) != baselines(runs[0]) for r in runs[1:]):
        raise SystemExit("The runs hold different baselines: they are not the same benchmark with another model seed.")
    settings = runs[0]["settings"]
    result = {"name": args.name, "runs": {}}
    print(f"{args.name}: families passing both criteria")
    for path, run in zip(args.runs, runs):
        passing = passes(run["verdicts"])
        result["runs"][path.name] = {"model_seed": run["settings"].get("model_seed"), "passes": passing}
        print(f"  model seed {run['settings'].get('model_seed')}: by the median {len(passing['median'])} "
              f"({', '.join(passing['median'])}), by the mean {len(passing['mean'])}")
    print(f"\npooled (the runs of {len(runs)} model seeds):")
    search = pooled_search(runs)
    verdicts, bootstrap = sb.report_verdicts(
        search, argparse.Namespace(target=runs[0]["target_fraction"], root_children=settings["root_children"]),
        settings["kt"].split(","))
    passing = passes(verdicts)
    print(f"  pooled: by the median {len(passing['median'])} ({', '.join(passing['median'])}), "
          f"by the mean {len(passing['mean'])}")
    result["pooled"] = {"medians": {f: r["puct_surrogate"]["median"] for f, r in search.items()},
                        "runs_per_family": {f: r["puct_surrogate"]["runs"] for f, r in search.items()},
                        "verdicts": verdicts, "bootstrap": bootstrap, "passes": passing}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
