"""Issue 20 probe: does weighing the trained families by their likeness to the searched problem's reference
(LearnedSurrogate(family_weights="similar")) make a held-out family's zero-shot first pick hit more often?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-06/similar_families.py [--families a,b]
      [--strengths 1,3] [--draws 400] [--out FILE.json]

Leave one family out, as the search benchmark does: a LearnedSurrogate with the app's ranker weight is trained on
every other recorded family, once with every row weighing the same (today's "rows") and once per strength in
--strengths with family_weights="similar", the held-out family's requests as `like` (only what all its variants share
is read: its sizes, its roofline, its reference's time and counters). For each model, as a search's first step
chooses (the highest expected log improvement over the reference, 1x) in `--draws` random 256-variant screens:
the share whose first pick reaches the target, and the rank of the first variant at target over the whole family.
Also written: the features the likeness read, and the three families most like the held-out one.

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
from search_engine.surrogates.learned import LearnedSurrogate  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT  # noqa: E402

ELEVEN = ("column_sum,gelu,layernorm,dot,bincount,spmv_ell,nbody,stencil3d,hgemm_mma,depthwise_conv2d,maxpool2d")


def main(argv=None) -> int:
    parser = probe_parser(__doc__, families=ELEVEN)
    parser.add_argument("--strengths", default="1,3", help="similar_strength values, comma-separated")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    strengths = [float(s) for s in args.strengths.split(",")]
    configs = [("rows", None)] + [("similar", s) for s in strengths]
    results = {}
    print(f"{'family':18s} " + "  ".join(f"{w}{'' if s is None else ' ' + str(s)}: first/rank".rjust(24)
                                          for w, s in configs) + "   most alike")
    for held in held_out:
        _, _, hit = family_hits(held)
        train = leave_out(datasets, held)
        requests = sb._requests(held.rows)
        cells, entry = [], {"variants": len(hit), "at_target_share": float(hit.mean()), "models": []}
        for weights, strength in configs:
            model = LearnedSurrogate(seed=0, ranker_weight=APP_WEIGHT, family_weights=weights,
                                     similar_strength=strength or 1.0).fit(
                train, groups=[r["problem_name"] for r in train], like=requests)
            gain = np.array([expected_log_improvement(f, 1.0) for f in model.forecast_many(requests)])
            first = screened_first_pick(gain, hit, args.draws)
            rank = first_hit_in_order(gain, hit)
            alike = sorted(model.family_similarity.items(), key=lambda kv: -kv[1])[:3]
            entry["models"].append({"family_weights": weights, "similar_strength": strength, "first_pick_hit": first,
                                    "first_hit_rank": rank, "most_alike": alike,
                                    "similarity_features": model.similarity_features})
            cells.append(f"{first:.2f}/{rank}".rjust(24))
        results[held.name] = entry
        alike = entry["models"][-1]["most_alike"]
        print(f"{held.name:18s} " + "  ".join(cells) + "   " + ", ".join(f"{n} {k:.2f}" for n, k in alike),
              flush=True)
    features = entry["models"][-1]["similarity_features"] if held_out else []
    print("\nthe likeness read: " + ", ".join(features))
    write_probe("similar_families", "benchmarks/probes/cpu_2026-12-06/similar_families.py", argv, args.out,
                {"draws": args.draws, "strengths": strengths, "families": results,
                 "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
