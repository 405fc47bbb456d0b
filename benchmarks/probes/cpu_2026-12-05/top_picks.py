"""Issue 20 probe: what a held-out family's zero-shot order puts first, and which knob values it favours against
which ones reach the target.

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-05/top_picks.py [--families a,b] [--top 6] [--out FILE.json]

Leave one family out, as the search benchmark does: a LearnedSurrogate with the app's ranker weight (model seed 0)
is trained on every other recorded family and orders the held-out family by expected log improvement over the
reference (1x), as a search's first step does. Printed and written: the top variants' knobs and measured speedups,
and for every value of every knob with a handful of values, the share of its variants at target, their median
speedup and their mean rank in that order (0 is first). The eight test families are refused.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import (TEST, family_hits, first_step_gains, held_out_families, leave_out,  # noqa: E402
                             probe_parser, write_probe)


def knob_table(knobs: list[dict], speedups: np.ndarray, hit: np.ndarray, rank: np.ndarray, most: int = 6) -> dict:
    """Per knob with at most `most` values, per value: variants, share at target, median speedup, mean rank."""
    table = {}
    for name in knobs[0]:
        values = sorted({str(k.get(name)) for k in knobs})
        if len(values) > most:
            continue
        table[name] = {}
        for value in values:
            idx = np.array([i for i, k in enumerate(knobs) if str(k.get(name)) == value])
            table[name][value] = {"variants": len(idx), "at_target_share": float(hit[idx].mean()),
                                  "median_speedup": float(np.median(speedups[idx])), "mean_rank": float(rank[idx].mean())}
    return table


def main(argv=None) -> int:
    parser = probe_parser(__doc__, families="depthwise_conv2d,maxpool2d,stencil3d")
    parser.add_argument("--top", type=int, default=6)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    results = {}
    for held in held_out:
        speedups, target, hit = family_hits(held)
        gain = first_step_gains(leave_out(datasets, held), held)
        order = np.argsort(-gain, kind="stable")
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(len(order))
        knobs = [r["candidate"]["knobs"] for r in held.rows]
        top = [{"knobs": knobs[i], "speedup": float(speedups[i]), "hit": bool(hit[i])} for i in order[:args.top]]
        table = knob_table(knobs, speedups, hit, rank)
        results[held.name] = {"variants": len(hit), "target": float(target), "best": float(speedups.max()),
                              "families_trained": len(datasets) - 1, "top": top, "knob_values": table}
        print(f"\n{held.name}: target {target:.3f}x, best {speedups.max():.3f}x, {hit.mean():.0%} of {len(hit)} at target")
        for t in top:
            print(f"  {t['speedup']:.2f}x {'hit ' if t['hit'] else 'miss'} {t['knobs']}")
        for name, values in table.items():
            cells = "  ".join(f"{v}: {c['at_target_share']:.2f} at target, median {c['median_speedup']:.2f}x, "
                              f"rank {c['mean_rank']:.0f}" for v, c in values.items())
            print(f"  {name:6s} {cells}")
    write_probe("top_picks", "benchmarks/probes/cpu_2026-12-05/top_picks.py", argv, args.out,
                {"families": results, "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
