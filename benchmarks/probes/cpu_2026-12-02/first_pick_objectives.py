"""Issue 20 probe: would a ranking objective pick a better first measurement on a family the model
has never seen?

  OMP_NUM_THREADS=1 python benchmarks/probes/cpu_2026-12-02/first_pick_objectives.py [--families a,b] [--draws 400]
                                                                                      [--out FILE.json]

The honest 8-family benchmark misses its goal on gemv, reduce_sum and softmax because the search's first
measurement misses the target (95% of max(best variant, vendor)); with 17-21% of gemv's and reduce_sum's
variants at target, measure-all needs only 3-4 measurements, so 3x under it means the first pick must
hit. Leave one family out (hgemm left out, as in the benchmark), each model is trained on the other
seven families' recorded H200 rows with the surrogate's own features (surrogates.features), and ranks
the held-out family:
  - today's learned surrogate (LearnedSurrogate, as search_bench.lopo_surrogates trains it), by its
    expected log speedup and by P(S > 1x), which is what orders a search's first step;
  - LightGBM lambdarank within each family (relevance: the speedup's quantile in its family, 30 levels);
  - LightGBM regression of the log speedup centred on each family's mean;
  - the rank average of today's expected log speedup and lambdarank.
For each: the rank of the first variant at target over the whole family, and the share of `--draws`
random 256-variant screens (the search's root width) whose top pick reaches the target, beside the share
of variants at target (what a random first pick gets). Settings are LightGBM's usual ones, fixed before
the run; nothing here is tuned on the held-out family.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import benchmarks.search_bench as sb  # noqa: E402
from search_engine.policy import prob_above  # noqa: E402
from search_engine.surrogates.features import feature_names  # noqa: E402
from search_engine.surrogates.learned import LearnedSurrogate, _matrix  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks" / "probes" / "cpu_2026-12-03"))
from recording_noise import SCREEN, write_probe  # noqa: E402

LEVELS = 30
LGBM = dict(n_estimators=200, learning_rate=0.05, num_leaves=15, min_child_samples=20, verbose=-1, n_jobs=1,
            random_state=0)


def relevance(speedups: np.ndarray, levels: int = LEVELS) -> np.ndarray:
    """The speedup's quantile within its family as an integer 0 .. levels-1 (lambdarank's labels).
    Equal speedups (common: 152 of reduce_sum's 810 variants repeat another variant's recorded speedup)
    get the same label. Breaking their ties in the order numpy's default sort leaves them took softmax's top-pick
    hit rate from 0.00 to 0.94 (in row order it stayed at 0.00): the ranker is that fragile."""
    order = rankdata(speedups, method="average") - 1
    return np.floor(order / max(len(speedups) - 1, 1) * (levels - 1)).astype(int)


def rank_average(*scores: np.ndarray) -> np.ndarray:
    return np.sum([rankdata(s) for s in scores], axis=0)


def first_pick(score: np.ndarray, speedups: np.ndarray, target: float, draws: int, seed: int = 0) -> dict:
    """The rank of the first variant at target when the whole family is ordered by score, and the
    share of random SCREEN-variant screens whose top-scored variant reaches the target."""
    hit = speedups >= target
    order = np.argsort(-score, kind="stable")
    rng = np.random.default_rng(seed)
    size = min(SCREEN, len(score))
    wins = 0
    for _ in range(draws):
        screen = rng.choice(len(score), size=size, replace=False)
        wins += bool(hit[screen[np.argmax(score[screen])]])
    best = float(speedups.max())
    return {"first_hit_rank": int(np.argmax(hit[order])) + 1 if hit.any() else None,
            "screen_top_pick_hit_rate": wins / draws,
            "top8_over_best": [round(float(speedups[i]) / best, 3) for i in order[:8]]}


def lgbm_scores(train: list[tuple[np.ndarray, np.ndarray]], X_held: np.ndarray) -> dict:
    import lightgbm as lgb

    X = np.vstack([x for x, _ in train])
    ranker = lgb.LGBMRanker(objective="lambdarank", label_gain=list(range(LEVELS + 1)),
                            lambdarank_truncation_level=50, **LGBM)
    ranker.fit(X, np.concatenate([relevance(y) for _, y in train]), group=[len(y) for _, y in train])
    regressor = lgb.LGBMRegressor(**LGBM)
    regressor.fit(X, np.concatenate([np.log(y) - np.log(y).mean() for _, y in train]))
    # What carries the ranker's first pick: its largest contributions (SHAP values from LightGBM).
    scores = ranker.predict(X_held)
    top = int(np.argmax(scores))
    contributions = ranker.predict(X_held[top:top + 1], pred_contrib=True)[0]
    names = feature_names() + ["(bias)"]
    carried = sorted(zip(contributions, names), key=lambda t: -abs(t[0]))[:6]
    return {"lambdarank": scores, "regression": regressor.predict(X_held),
            "lambdarank_top_pick_contributions": [(n, round(float(v), 3)) for v, n in carried],
            "lambdarank_top_pick_index": top}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="", help="held-out families to report (default: every one trained on)")
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--exclude", default="hgemm",
                        help="recorded families left out of training and report (default hgemm, as the honest "
                             "benchmark of 2026-12-01; '' trains on every recorded family, as the app does)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    excluded = {f for f in args.exclude.split(",") if f}
    datasets = [d for d in sb.recorded_datasets() if d.name not in excluded]
    if not datasets:
        print("No recorded H200 records under kernellab/problems/*/records.", file=sys.stderr)
        return 2
    wanted = {f for f in args.families.split(",") if f} or {d.name for d in datasets}
    matrices = {d.name: (_matrix(sb._requests(d.rows)), np.array([r["speedup"] for r in d.rows])) for d in datasets}
    results = {}
    for held in datasets:
        if held.name not in wanted:
            continue
        others = [d for d in datasets if d is not held]
        train_rows = [r for d in others for r in d.rows]
        model = LearnedSurrogate(seed=0).fit(train_rows, groups=[r["problem_name"] for r in train_rows])
        forecasts = model.forecast_many(sb._requests(held.rows))
        X_held, speedups = matrices[held.name]
        lgbm = lgbm_scores([matrices[d.name] for d in others], X_held)
        expected = np.array([f.expected_log_speedup() for f in forecasts])
        scores = {
            "learned_expected_log_speedup": expected,
            "learned_p_beats_reference": np.array([prob_above(f, 1.0) for f in forecasts]),
            "lambdarank": lgbm["lambdarank"],
            "regression_centred": lgbm["regression"],
            "rank_average_learned_lambdarank": rank_average(expected, lgbm["lambdarank"]),
        }
        top = held.rows[lgbm["lambdarank_top_pick_index"]]
        results[held.name] = {
            "variants": len(speedups), "target": held.target, "best": float(speedups.max()),
            "at_target_share": float(np.mean(speedups >= held.target)),
            "models": {name: first_pick(s, speedups, held.target, args.draws) for name, s in scores.items()},
            "lambdarank_top_pick": {"knobs": top["candidate"].get("knobs"),
                                    "over_best": round(top["speedup"] / float(speedups.max()), 3),
                                    "contributions": lgbm["lambdarank_top_pick_contributions"]},
        }
        print(f"{held.name}: done", flush=True)
    names = ["learned_expected_log_speedup", "learned_p_beats_reference", "lambdarank", "regression_centred",
             "rank_average_learned_lambdarank"]
    short = ["learned E", "learned P", "lambdarank", "regression", "rank avg"]
    print(f"\nShare of random {SCREEN}-variant screens whose top pick reaches the target (first-hit rank over the "
          "whole family in brackets)")
    print(f"{'family':14s} {'random':>7s} " + " ".join(f"{s:>14s}" for s in short))
    for family, r in results.items():
        cells = " ".join(f"{r['models'][n]['screen_top_pick_hit_rate']:>7.2f} ({r['models'][n]['first_hit_rank']!s:>4s})"
                         for n in names)
        print(f"{family:14s} {r['at_target_share']:>7.2f} {cells}")
    write_probe("first_pick_objectives", "benchmarks/probes/cpu_2026-12-02/first_pick_objectives.py", argv, args.out,
                {"draws": args.draws, "lightgbm": LGBM, "levels": LEVELS, "families": results,
                 "seconds": time.perf_counter() - started})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
