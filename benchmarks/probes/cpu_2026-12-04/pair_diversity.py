"""Issue 20 probe: a search's first step measures two variants, the two with the highest expected log
improvement. When the first misses the target, does the second miss with it because it is nearly the same
kernel, and would a second pick that differs from the first in more knobs hit more often?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-04/pair_diversity.py [--families a,b] [--draws 400]
                                                                              [--out FILE.json]

Leave one family out over every recorded family: a LearnedSurrogate with the app's settings is trained on the
others and forecasts the held-out family. In `--draws` random 256-variant screens (the root's screening), the
first pick is the variant with the highest expected log improvement over the reference (1x); the second is,
by rule,
  top2      the next by expected improvement (today's search);
  differ-k  the highest by expected improvement among those whose knob values differ from the first pick's in
            at least k knobs (k = 2, and half the family's knobs rounded up).
For each rule: the share of screens where the pair holds a hit, and where the second hits given that the first
missed; with the share a random second pick would give beside them.

The default families are the six validation families; the eight the search benchmark's test searches are
refused.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import (SCREEN, TEST, VALIDATION, family_hits, first_step_gains, held_out_families,  # noqa: E402
                             leave_out, probe_parser, write_probe)


def knob_matrix(rows, names) -> np.ndarray:
    """Each row's knob values as integer codes, one column per knob."""
    columns = []
    for name in names:
        values = [repr(r["candidate"]["knobs"][name]) for r in rows]
        codes = {v: i for i, v in enumerate(sorted(set(values)))}
        columns.append([codes[v] for v in values])
    return np.array(columns, dtype=int).T


def pair_rates(gain: np.ndarray, hit: np.ndarray, knobs: np.ndarray, min_differ: int, draws: int,
               seed: int = 0) -> dict:
    """Over random screens: P(first hits), P(pair holds a hit), P(second hits | first missed), and the hit
    rate of a random second pick among the screen's others when the first missed."""
    rng = np.random.default_rng(seed)
    n = len(gain)
    width = min(SCREEN, n)
    first_hits = pair_hits = misses = second_after_miss = 0
    random_after_miss = 0.0
    no_second = 0
    for _ in range(draws):
        screen = rng.choice(n, size=width, replace=False)
        order = screen[np.argsort(-gain[screen], kind="stable")]
        first = order[0]
        rest = order[1:]
        if min_differ > 0:
            differ = (knobs[rest] != knobs[first]).sum(axis=1)
            far = rest[differ >= min_differ]
            if len(far) == 0:
                no_second += 1
                far = rest
            second = far[0]
        else:
            second = rest[0]
        first_hits += bool(hit[first])
        pair_hits += bool(hit[first] or hit[second])
        if not hit[first]:
            misses += 1
            second_after_miss += bool(hit[second])
            random_after_miss += float(hit[rest].mean())
    return {"first_hit": first_hits / draws, "pair_hit": pair_hits / draws,
            "second_hit_after_miss": second_after_miss / misses if misses else None,
            "random_second_after_miss": random_after_miss / misses if misses else None,
            "first_missed": misses, "no_far_second": no_second}


def main(argv=None) -> int:
    args = probe_parser(__doc__, families=VALIDATION).parse_args(argv)
    started = time.perf_counter()
    found = held_out_families(args.families, refuse=TEST, exclude=args.exclude)
    if found is None:
        return 2
    datasets, held_out = found
    results = {}
    for held in held_out:
        train = leave_out(datasets, held)
        gain = first_step_gains(train, held)
        speedups, _, hit = family_hits(held)
        names = list(held.knobs)
        knobs = knob_matrix(held.rows, names)
        half = math.ceil(len(names) / 2)
        rules = {"top2": 0, "differ-2": 2, f"differ-{half}": half}
        results[held.name] = {"variants": len(speedups), "knobs": len(names), "at_target_share": float(hit.mean()),
                              "rules": {name: pair_rates(gain, hit, knobs, k, args.draws) for name, k in rules.items()}}
        print(f"{held.name}: done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\nIn random {SCREEN}-variant screens: P(first pick hits); per rule for the second pick, P(the pair holds "
          "a hit) and P(second hits | first missed) against a random second pick's")
    for family, r in results.items():
        rules = r["rules"]
        first = next(iter(rules.values()))["first_hit"]
        cells = "  ".join(f"{name} {v['pair_hit']:.2f} ({v['second_hit_after_miss'] if v['second_hit_after_miss'] is None else round(v['second_hit_after_miss'], 2)}"
                          f" vs {v['random_second_after_miss'] if v['random_second_after_miss'] is None else round(v['random_second_after_miss'], 2)})"
                          for name, v in rules.items())
        print(f"{family:12s} knobs {r['knobs']}  hits {r['at_target_share']:.2f}  first {first:.2f}  {cells}")
    write_probe("pair_diversity", "benchmarks/probes/cpu_2026-12-04/pair_diversity.py", argv, args.out,
                {"draws": args.draws, "families": results, "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
