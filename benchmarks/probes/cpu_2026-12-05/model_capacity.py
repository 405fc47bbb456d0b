"""Issue 20 probe: does the recorded-data model's capacity (its boosted trees' size, leaves' minimum rows, rounds)
move a held-out family's zero-shot order, and which way?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-05/model_capacity.py [--families a,b]
      [--configs today,small,wide-leaves,long] [--draws 400] [--out FILE.json]

Leave one family out, as the search benchmark does: a LearnedSurrogate with the app's ranker weight is trained on
every other recorded family under each named configuration of its HistGradientBoosting classifier (CONFIGS).
For each, as a search's first step chooses (the highest expected log improvement over the reference, 1x) in
`--draws` random 256-variant screens: the share whose first pick reaches the target, the share whose first two
picks hold a hit; the rank of the first variant at target over the whole family; and Spearman's rho of the
expected log improvement against the measured speedup over the family. The model seed is not varied: the
training-composition probe found the zero-shot picks identical under seeds 0 and 1.

The default families are the nine validation families of protocols 18-20 (hgemm_mma to 95% of its best
variant); the eight test families are refused.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[3]

sys.path[:0] = [str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"), str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-04")]
from pair_diversity import pair_rates  # noqa: E402
from recording_noise import (NINE, TEST, family_hits, first_hit_in_order, first_step_gains,  # noqa: E402
                             held_out_families, leave_out, probe_parser, write_probe)

# today's classifier, and three changes of its capacity (LearnedSurrogate's keyword arguments)
CONFIGS = {
    "today": {},
    "small": {"max_leaf_nodes": 7, "min_samples_leaf": 100},
    "wide-leaves": {"min_samples_leaf": 400},
    "long": {"max_iter": 150, "learning_rate": 0.04},
}


def main(argv=None) -> int:
    parser = probe_parser(__doc__, families=NINE)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="configurations of CONFIGS, comma-separated")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    names = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        print("No configuration of these names: " + ", ".join(unknown) + f" (known: {', '.join(CONFIGS)})",
              file=sys.stderr)
        return 2
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    results = {}
    print(f"{'family':12s} " + "  ".join(f"{n + ': first/pair/rank/rho':>34s}" for n in names))
    for held in held_out:
        speedups, _, hit = family_hits(held)
        train = leave_out(datasets, held)
        rows = {}
        for name in names:
            gain = first_step_gains(train, held, **CONFIGS[name])
            rates = pair_rates(gain, hit, np.zeros((len(gain), 0), dtype=int), 0, args.draws)
            rows[name] = {"first_pick_hit": rates["first_hit"], "pair_hit": rates["pair_hit"],
                          "first_hit_rank": first_hit_in_order(gain, hit),
                          "spearman": float(spearmanr(gain, speedups).statistic)}
        results[held.name] = {"variants": len(hit), "at_target_share": float(hit.mean()),
                              "families_trained": len(datasets) - 1, "configs": rows}
        cells = "  ".join(f"{r['first_pick_hit']:.2f}/{r['pair_hit']:.2f}/{r['first_hit_rank']}/{r['spearman']:+.2f}".rjust(34)
                          for r in rows.values())
        print(f"{held.name:12s} {cells}", flush=True)
    write_probe("model_capacity", "benchmarks/probes/cpu_2026-12-05/model_capacity.py", argv, args.out,
                {"draws": args.draws, "configs": {n: CONFIGS[n] for n in names}, "families": results,
                 "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
