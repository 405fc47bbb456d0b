"""Issue 20 probe: how much does a family's zero-shot first pick depend on which other families the model was
trained on, beside how much it depends on the model's seed?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-05/training_composition.py [--families a,b]
      [--without nbody+stencil3d,hgemm_mma] [--seeds 0,1] [--draws 400] [--out FILE.json]

Leave one family out, as the search benchmark does: a LearnedSurrogate with the app's ranker weight is trained
on every other recorded family (the test families' records among them: they are training data, only their
searches are the test), and again without each group of families named in --without (a group is names joined
by "+"), each with every model seed in --seeds. For each model, as a search's first step chooses (the highest
expected log improvement over the reference, 1x) in `--draws` random 256-variant screens: the share whose first
pick reaches the target, the share whose first two picks hold a hit, and the rank of the first variant at
target over the whole family.

The default families are the nine validation families of protocols 18-19 (hgemm_mma to 95% of its best
variant); the eight test families are refused.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]

sys.path[:0] = [str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"), str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-04")]
from pair_diversity import pair_rates  # noqa: E402
from recording_noise import (NINE, TEST, family_hits, first_hit_in_order, first_step_gains,  # noqa: E402
                             held_out_families, probe_parser, write_probe)


def main(argv=None) -> int:
    parser = probe_parser(__doc__, families=NINE)
    parser.add_argument("--without", default="nbody+stencil3d,hgemm_mma,nbody+stencil3d+hgemm_mma",
                        help="groups of families left out of training in turn, comma-separated, names joined by +")
    parser.add_argument("--seeds", default="0,1", help="the models' seeds")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    known = {d.name for d in datasets}
    groups = [()] + [tuple(g.split("+")) for g in args.without.split(",") if g]
    unknown = sorted({name for g in groups for name in g} - known)
    if unknown:
        print("No recorded family of these names: " + ", ".join(unknown), file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    print(f"{'family':12s} {'trained without':28s} " + "  ".join(f"seed {s}: first/pair/rank" for s in seeds))
    for held in held_out:
        _, _, hit = family_hits(held)
        results[held.name] = {"variants": len(hit), "at_target_share": float(hit.mean()), "trainings": []}
        for group in groups:
            train = [r for d in datasets if d is not held and d.name not in group for r in d.rows]
            per_seed = []
            for seed in seeds:
                gain = first_step_gains(train, held, seed=seed)
                # the first two picks as a step makes them (pair_diversity's "top2" rule; no knob is compared)
                rates = pair_rates(gain, hit, np.zeros((len(gain), 0), dtype=int), 0, args.draws)
                per_seed.append({"seed": seed, "first_pick_hit": rates["first_hit"], "pair_hit": rates["pair_hit"],
                                 "first_hit_rank": first_hit_in_order(gain, hit)})
            trained = sum(d is not held and d.name not in group for d in datasets)
            results[held.name]["trainings"].append({"without": list(group), "families_trained": trained,
                                                    "models": per_seed})
            cells = "  ".join(f"{m['first_pick_hit']:.2f}/{m['pair_hit']:.2f}/{m['first_hit_rank']}".rjust(24)
                              for m in per_seed)
            print(f"{held.name:12s} {'+'.join(group) or '-':28s} {cells}", flush=True)
    write_probe("training_composition", "benchmarks/probes/cpu_2026-12-05/training_composition.py", argv, args.out,
                {"draws": args.draws, "seeds": seeds, "families": results, "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
