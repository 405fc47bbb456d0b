"""Issue 20 probe: does the ranking prior learn a held-out family's fastest variants better when it labels the
recorded variants by how far they run from their family's fastest ("near-best") rather than by their speedup's
quantile ("quantile", today's)?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-06/ranker_relevance.py [--families a,b]
      [--relevances quantile,near-best] [--weights 0.5] [--draws 400] [--out FILE.json]

Leave one family out, as the search benchmark does: a LearnedSurrogate with the app's settings and ranker weight is
trained on every other recorded family, once per relevance in --relevances; its prior's weight in the mixture is then
set to each of --weights in turn (the weight only mixes the two fitted models' forecasts). For each model and weight, as a search's first step
chooses (the highest expected log improvement over the reference, 1x) in `--draws` random 256-variant screens: the
share whose first pick reaches the target, the rank of the first variant at target over the whole family, and the
share of the model's top 10 over the whole family at target (beside the family's share of variants at target, what
a random pick gets).

The default families are the eleven validation families (hgemm_mma to 95% of its best variant); the eight test
families are refused.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import (TEST, family_hits, first_hit_in_order, held_out_families, leave_out,  # noqa: E402
                             probe_parser, screened_first_pick, write_probe)

import benchmarks.search_bench as sb  # noqa: E402  (recording_noise put the repository on the path)
from search_engine.policy import expected_log_improvement  # noqa: E402
from search_engine.surrogates.learned import RANKER_RELEVANCES, LearnedSurrogate  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT  # noqa: E402

ELEVEN = ("column_sum,gelu,layernorm,dot,bincount,spmv_ell,nbody,stencil3d,hgemm_mma,depthwise_conv2d,maxpool2d")
TOP = 10


def main(argv=None) -> int:
    parser = probe_parser(__doc__, families=ELEVEN)
    parser.add_argument("--relevances", default=",".join(RANKER_RELEVANCES),
                        help="the ranker's relevance labels to compare, comma-separated")
    parser.add_argument("--weights", default=str(APP_WEIGHT),
                        help="the ranking prior's weights in the mixture to read each model at, comma-separated")
    args = parser.parse_args(argv)
    relevances = [r for r in args.relevances.split(",") if r]
    weights = [float(w) for w in args.weights.split(",") if w]
    unknown = sorted(set(relevances) - set(RANKER_RELEVANCES))
    if unknown:
        print("Unknown relevance: " + ", ".join(unknown) + f" (one of {', '.join(RANKER_RELEVANCES)})",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    results = {}
    configs = [(how, weight) for how in relevances for weight in weights]
    print(f"{'family':18s} {'at target':>9s} " + "  ".join(f"{r} {w}: first/rank/top{TOP}".rjust(32)
                                                          for r, w in configs))
    for held in held_out:
        _, _, hit = family_hits(held)
        train = leave_out(datasets, held)
        requests = sb._requests(held.rows)
        cells, entry = [], {"variants": len(hit), "at_target_share": float(hit.mean()), "models": []}
        for how in relevances:
            model = LearnedSurrogate(seed=0, ranker_weight=APP_WEIGHT, ranker_relevance=how).fit(
                train, groups=[r["problem_name"] for r in train])
            for weight in weights:
                model.ranker_weight = weight
                gain = np.array([expected_log_improvement(f, 1.0) for f in model.forecast_many(requests)])
                first = screened_first_pick(gain, hit, args.draws)
                rank = first_hit_in_order(gain, hit)
                top = float(hit[np.argsort(-gain, kind="stable")[:TOP]].mean())
                entry["models"].append({"ranker_relevance": how, "ranker_weight": weight, "first_pick_hit": first,
                                        "first_hit_rank": rank, f"top{TOP}_at_target": top})
                cells.append(f"{first:.2f}/{rank}/{top:.1f}".rjust(32))
        results[held.name] = entry
        print(f"{held.name:18s} {hit.mean():9.2f} " + "  ".join(cells), flush=True)
    sums = {f"{how} {weight}": {
        "first_pick_hit": sum(e["models"][i]["first_pick_hit"] for e in results.values()),
        # (a family with no variant at target counts all its variants)
        "first_hit_rank": sum(e["models"][i]["first_hit_rank"] or e["variants"] for e in results.values())}
        for i, (how, weight) in enumerate(configs)}
    for name, total in sums.items():
        print(f"sum over the families, {name}: first-pick hits {total['first_pick_hit']:.2f}, "
              f"first-hit ranks {total['first_hit_rank']}")
    write_probe("ranker_relevance", "benchmarks/probes/cpu_2026-12-06/ranker_relevance.py", argv, args.out,
                {"draws": args.draws, "relevances": relevances, "weights": weights, "families": results, "sums": sums,
                 "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
