"""Issue 20 probe: does a committee of the calibration folds' models order a family it has never seen
better, or more steadily, than the one model trained on every family?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-04/committee_order.py [--families a,b] [--draws 400]
                                                                                [--out FILE.json]

Leave one family out over every recorded family: a LearnedSurrogate with the app's ranker weight is trained
on the others with committee=True (search_engine/surrogates/learned.py), so it keeps its calibration folds'
models. The same fitted object forecasts the held-out family twice: with the committee (the full model and
the fold models averaged, the ranking prior's scores likewise), and without it (the full model alone, as
today; the full model is the same in both). For each, as in the ranker-weight probe
(benchmarks/probes/cpu_2026-12-03/ranker_weight.py): the share of `--draws` random 256-variant screens whose
top pick by P(S > 1x) reaches the target, the rank of the first variant at target over the whole family, and
the Spearman correlation of the expected log speedup with the measured speedup.

The default families are the six validation families (column_sum, gelu, layernorm, dot, bincount, spmv_ell);
the eight families the search benchmark's test searches are not looked at.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import benchmarks.search_bench as sb  # noqa: E402
from search_engine.policy import prob_above  # noqa: E402
from search_engine.surrogates.learned import LearnedSurrogate  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import (SCREEN, TEST, VALIDATION, family_hits, first_hit_in_order, held_out_families,  # noqa: E402
                             leave_out, probe_parser, screened_first_pick, write_probe)


def scores(model: LearnedSurrogate, requests, speedups: np.ndarray, hit: np.ndarray, draws: int) -> dict:
    forecasts = model.forecast_many(requests)
    p_beat = np.array([prob_above(f, 1.0) for f in forecasts])
    mean = np.array([f.expected_log_speedup() for f in forecasts])
    return {"screen_top_pick_hit_rate": screened_first_pick(p_beat, hit, draws),
            "first_hit_rank": first_hit_in_order(p_beat, hit),
            "first_hit_rank_by_mean": first_hit_in_order(mean, hit),
            "spearman": float(spearmanr(mean, speedups).statistic)}


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
        model = LearnedSurrogate(seed=0, ranker_weight=APP_WEIGHT, committee=True).fit(
            train, groups=[r["problem_name"] for r in train])
        requests = sb._requests(held.rows)
        speedups, target, hit = family_hits(held)
        committee = scores(model, requests, speedups, hit, args.draws)
        members, ranker_members = model._fitted.members, model._ranker.members
        model._fitted.members, model._ranker.members = (), []
        single = scores(model, requests, speedups, hit, args.draws)
        model._fitted.members, model._ranker.members = members, ranker_members
        results[held.name] = {"variants": len(speedups), "at_target_share": float(hit.mean()),
                              "single": single, "committee": committee}
        print(f"{held.name}: done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\nShare of random {SCREEN}-variant screens whose top pick by P(S > 1x) reaches the target; first-hit "
          "rank by P(S > 1x) and by the mean; Spearman of the mean")
    print(f"{'family':12s} {'random':>7s} | {'single':>28s} | {'committee':>28s}")
    for family, r in results.items():
        cells = " | ".join(f"{r[k]['screen_top_pick_hit_rate']:5.2f} {r[k]['first_hit_rank']!s:>5s} "
                           f"{r[k]['first_hit_rank_by_mean']!s:>5s} {r[k]['spearman']:6.2f}" for k in ("single", "committee"))
        print(f"{family:12s} {r['at_target_share']:7.2f} | {cells}")
    write_probe("committee_order", "benchmarks/probes/cpu_2026-12-04/committee_order.py", argv, args.out,
                {"draws": args.draws, "families": results, "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
