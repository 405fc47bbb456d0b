"""Issue 20 probe: two more ways to move the honest 8-family search benchmark, each against the committed
baselines of the same families: SASS instruction-mix features for the learned surrogate, and more
exploration in the tree.

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-03/sass_and_exploration.py [--seeds 10] [--out FILE.json]
  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-03/sass_and_exploration.py --trace sgemm:0,3

--trace FAMILY:SEEDS prints, for those seeds of the kept search, every measurement in order (its speedup and
knobs) and writes nothing.

Every configuration runs the surrogate PUCT of `benchmarks/search_bench.py` (its defaults: 256 screened at the
root, 2 measurements a step, target 95% of max(best variant, vendor), a miss counted as the budget) on the
recorded H200 data, trained as the app trains (every recorded family but the one searched, hgemm included,
hgemm not searched), and is scored against the measure-all PUCT and Kernel Tuner medians of the committed
run `search_cpu_2026-12-02_8families_honest_tf32x3_hgemm-trained.json` (those do not depend on the surrogate).
- `kept`: today's settings; it must give the committed run's surrogate values seed for seed (checked).
- `c=2`, `c=4`: PUCT's exploration constant (today 1).
- `sass`: the surrogate's features plus an instruction mix read from the SASS counts the compiler facts
  already hold (recorded for every variant): log instruction count, the share of tensor-core, fp32 math,
  global load/store, async copy, shared load/store, global and shared atomic, barrier, shuffle, special
  function and local-memory instructions, and the mean width of global loads and stores; each for the
  candidate and as its difference from the reference's. The held-out models are retrained with them.
For each model set also the held-out ranking over each whole family: Spearman, the rank of the first
variant at target, and the top pick's speedup over the family's best.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import benchmarks.search_bench as sb  # noqa: E402
import search_engine.surrogates.features as features  # noqa: E402
import search_engine.surrogates.learned as learned  # noqa: E402

BASELINE = ROOT / "benchmarks" / "results" / "search_cpu_2026-12-02_8families_honest_tf32x3_hgemm-trained.json"

SASS_GROUPS = {
    "tensor": r"(HMMA|IMMA|HGMMA|GMMA|QMMA|BMMA|DMMA)",
    "fp32": r"(FFMA|FMUL|FADD)(\.|$)",
    "global_load": r"LDG(\.|$)",
    "async_copy": r"LDGSTS",
    "global_store": r"STG",
    "shared_load": r"LDS",
    "shared_store": r"STS",
    "global_atomic": r"(REDG|RED|ATOMG|ATOM)(\.|$)",
    "shared_atomic": r"ATOMS",
    "barrier": r"BAR",
    "shuffle": r"SHFL",
    "special_function": r"MUFU",
    "local_memory": r"(LDL|STL)",
}
_PATTERNS = {name: re.compile("^" + pattern) for name, pattern in SASS_GROUPS.items()}
SASS_NAMES = (["sass_log_instructions"] + [f"sass_share_{name}" for name in SASS_GROUPS]
              + ["sass_global_load_bytes", "sass_global_store_bytes"])
_WIDTHS = {"128": 16.0, "64": 8.0}


def _width(op: str) -> float:
    """An access's bytes from its opcode's modifiers: LDG.E.128 16, .64 8, otherwise 4."""
    return next((_WIDTHS[part] for part in op.split(".")[1:] if part in _WIDTHS), 4.0)


def _mean_width(sass: dict, prefix: str) -> float:
    """Mean bytes of the instructions opening with prefix (LDGSTS is not LDG); 0 with none."""
    ops = [(op, n) for op, n in sass.items() if re.match(prefix + r"(\.|$)", op)]
    total = sum(n for _, n in ops)
    return sum(_width(op) * n for op, n in ops) / total if total else 0.0


def sass_mix(facts: dict | None) -> list[float]:
    """The instruction mix of SASS_NAMES from compiler facts ({"sass": {opcode: count}}); NaN without SASS."""
    sass = (facts or {}).get("sass")
    if not sass:
        return [math.nan] * len(SASS_NAMES)
    total = sum(sass.values())
    shares = [sum(n for op, n in sass.items() if _PATTERNS[name].match(op)) / total for name in SASS_GROUPS]
    return [math.log1p(total), *shares, _mean_width(sass, "LDG"), _mean_width(sass, "STG")]


@contextlib.contextmanager
def sass_features():
    """The learned surrogate's features with the SASS mix (candidate, and candidate minus reference) appended,
    for models fitted and used inside the block."""
    names, row = features.feature_names, features.request_features

    def feature_names():
        return names() + SASS_NAMES + [f"delta_{n}" for n in SASS_NAMES]

    def request_features(request, memo=None):
        mine, reference = sass_mix(request.compiler_facts), sass_mix(request.reference_compiler_facts)
        return np.concatenate([row(request, memo), mine, np.subtract(mine, reference)]).astype(float)

    features.feature_names, features.request_features, learned.feature_names = feature_names, request_features, feature_names
    try:
        yield
    finally:
        features.feature_names, features.request_features, learned.feature_names = names, row, names


def ranking(models: dict, datasets: list) -> dict:
    out = {}
    for data in datasets:
        forecasts = models[data.name].forecast_many(sb._requests(data.rows))
        score = np.array([f.expected_log_speedup() for f in forecasts])
        speedup = np.array([r["speedup"] for r in data.rows])
        order = np.argsort(-score, kind="stable")
        hit = speedup >= data.target
        out[data.name] = {"spearman": float(spearmanr(score, speedup).correlation),
                          "first_at_target_rank": int(np.argmax(hit[order])) + 1 if hit.any() else None,
                          "top_pick_over_best": float(speedup[order[0]] / speedup.max())}
    return out


def search(models: dict, datasets: list, searched: list[str], settings, seeds: int, baseline: dict) -> dict:
    families, three, beats = {}, 0, 0
    for data in [d for d in datasets if d.name in searched]:
        runs = [sb.run_puct(data, s, copy.deepcopy(models[data.name]), False, settings, root_children=256)
                for s in range(seeds)]
        values = [data.budget if r["measurements"] is None else r["measurements"] for r in runs]
        median = statistics.median(values)
        committed = baseline["search"][data.name]
        measure_all = committed["puct_measure_all"]["median"]
        best_kt = min(v["median"] for k, v in committed.items() if k.startswith("kt_"))
        three += measure_all / median >= 3
        beats += best_kt / median > 1
        families[data.name] = {"values": values, "median": median, "committed_values": committed["puct_surrogate"]["values"],
                               "measure_all_over_surrogate": measure_all / median, "best_kt_over_surrogate": best_kt / median}
    return {"families": families, "three_x_under_measure_all": three, "fewer_than_best_kt": beats}


def trace(models: dict, datasets: list, settings, which: str) -> dict:
    family, _, seeds = which.partition(":")
    data = next(d for d in datasets if d.name == family)
    out = {}
    for seed in [int(s) for s in seeds.split(",") if s]:
        run = sb.run_puct(data, seed, copy.deepcopy(models[family]), False, settings, root_children=256)
        print(f"{family} seed {seed}: target {data.target:.3g}x reached at measurement {run['measurements']}")
        out[seed] = [data.records[key] for key in run["order"]]
        for i, record in enumerate(out[seed], start=1):
            print(f"  {i:4d} {record.get('speedup') or 0:7.2f}x  {record['knobs']}")
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"probe_sass_and_exploration_cpu_{dt.date.today()}.json"))
    parser.add_argument("--trace", default="", help="FAMILY:SEED[,SEED...]: print the kept search's measurements")
    args = parser.parse_args(argv)
    baseline = json.loads(BASELINE.read_text())
    searched = list(baseline["search"])
    base = baseline["settings"]
    datasets = sb.recorded_datasets()
    started = time.time()
    settings = argparse.Namespace(**{k: base[k] for k in ("threshold", "gpu_per_step", "children", "min_gpu_per_step",
                                                            "c", "retrain_every", "min_beat_prob", "conformal",
                                                            "online_weight", "max_steps")}, model_seed=base.get("model_seed", 0))
    configs = {}
    models, _ = sb.lopo_surrogates(datasets, settings)
    if args.trace:
        return trace(models, datasets, settings, args.trace)
    rank_kept = ranking(models, datasets)
    for name, c in (("kept", settings.c), ("c=2", 2.0), ("c=4", 4.0)):
        configs[name] = search(models, datasets, searched, argparse.Namespace(**{**vars(settings), "c": c}),
                               args.seeds, baseline) | {"ranking": rank_kept}
    with sass_features():
        models, _ = sb.lopo_surrogates(datasets, settings)
        configs["sass"] = search(models, datasets, searched, settings, args.seeds, baseline) | {
            "ranking": ranking(models, datasets)}
    reproduces = all(f["values"] == f["committed_values"] for f in configs["kept"]["families"].values())
    print(f"{'family':14s}" + "".join(f"{name:>18s}" for name in configs) + "   (surrogate median; all/sur, bestKT/sur)")
    for family in searched:
        cells = "".join(f"{c['families'][family]['median']:6.1f} {c['families'][family]['measure_all_over_surrogate']:5.2f} "
                        f"{c['families'][family]['best_kt_over_surrogate']:5.2f}" for c in configs.values())
        print(f"{family:14s}{cells}")
    print("3x / <bestKT: " + ", ".join(f"{n} {c['three_x_under_measure_all']}/{c['fewer_than_best_kt']}" for n, c in configs.items()))
    print(f"{'held-out rank':14s}{'kept rho':>10s}{'first':>7s}{'top/best':>9s}{'sass rho':>10s}{'first':>7s}{'top/best':>9s}")
    for family in configs["kept"]["ranking"]:
        k, s = configs["kept"]["ranking"][family], configs["sass"]["ranking"][family]
        print(f"{family:14s}{k['spearman']:10.3f}{k['first_at_target_rank'] or 0:7d}{k['top_pick_over_best']:9.3f}"
              f"{s['spearman']:10.3f}{s['first_at_target_rank'] or 0:7d}{s['top_pick_over_best']:9.3f}")
    print(f"the kept settings give the committed run's surrogate values: {reproduces}")
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cpu": sb.cpu_name(),
           "baseline": str(BASELINE.relative_to(ROOT)), "seeds": args.seeds, "settings": vars(settings),
           "sass_features": SASS_NAMES, "reproduces_committed_surrogate_runs": reproduces, "configs": configs,
           "seconds": time.time() - started}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    sb.pin_hash_seed([os.path.abspath(__file__), *sys.argv[1:]])
    main()
