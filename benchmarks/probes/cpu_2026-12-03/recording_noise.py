"""Issue 20 probe: how far does one H200 recording of a family move from the next, and what does that
leave of the search benchmark's target?

  python benchmarks/probes/cpu_2026-12-03/recording_noise.py [--second DIR] [--draws 400] [--out FILE.json]

The honest 8-family benchmark replays one recording per family (kernellab/problems/<family>/records/
h200.jsonl.gz) and counts measurements to 95% of max(best variant, vendor). On 2026-12-03 every family
but hgemm was recorded again on the H200, from scratch, with the same protocol and inputs
(benchmarks/device/rerecord_families.sh, into benchmarks/results/recordings/h200_2026-12-03). For each
family this compares the two recordings variant by variant:
  - the log ratio of each variant's speedup (second / first): median, spread, 95th percentile of its size;
  - each recording's target, and the variants at target in one, the other and both;
  - a first pick made by knowing the first recording exactly: over `--draws` random screens of 256
    variants (the search's root width), the share whose fastest variant by the first recording is at
    the second recording's target, beside the share of variants at target (a random first pick);
  - measuring every variant in the first recording's order, the measurement that first reaches the
    second recording's target.
The last two bound what any model can do on a family: a model that knew the first recording exactly could
do no better on the second than these.

--in-family adds what the surrogate's features can do once a model has seen the family: the learned
surrogate trained as the app trains it (every other recorded family, hgemm included) plus 4 of 5 random
folds of the family's own variants, scoring the fifth, against the same model trained without the family
(leave one family out, what the benchmark's search starts from). Both are scored on the first recording
by the same screened first pick and first hit over the whole family. Slow: six fits a family.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import benchmarks.search_bench as sb  # noqa: E402
from search_engine.policy import expected_log_improvement  # noqa: E402
from search_engine.surrogates.learned import LearnedSurrogate  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT  # noqa: E402

SECOND = ROOT / "benchmarks" / "results" / "recordings" / "h200_2026-12-03"
SCREEN = 256


# the six validation families the settings protocols 1-12 searched (nbody and stencil3d joined them from protocol
# 15 on; the first-pick probes keep the six by default, so that their committed results repeat) and the test families
VALIDATION = "column_sum,gelu,layernorm,dot,bincount,spmv_ell"
TEST = frozenset({"conv2d", "gemv", "histogram256", "reduce_sum", "rmsnorm", "sgemm", "softmax", "transpose"})
# the nine validation families of protocols 18-20 (hgemm_mma to 95% of its best variant)
NINE = "column_sum,gelu,layernorm,dot,bincount,spmv_ell,nbody,stencil3d,hgemm_mma"


def probe_parser(doc: str, families: str = VALIDATION) -> argparse.ArgumentParser:
    """A first-pick probe's arguments: --families (held out in turn), --draws (random screens), --out."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--families", default=families, help="held-out families to report")
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--out", default=None)
    parser.add_argument("--exclude", default="",
                        help="recorded families left out of everything, comma-separated (to repeat a probe made "
                             "before they were recorded: --exclude depthwise_conv2d,maxpool2d for one made before "
                             "2026-12-05's twenty-fourth session)")
    return parser


def held_out_families(families: str, refuse: frozenset = frozenset(), exclude: str = ""):
    """(every recorded dataset but those named in `exclude`, those named in `families`), or None after saying on
    stderr why not: a family in `refuse` (the test families, for a probe that must not look at them), one without
    records, or one both held out and excluded."""
    wanted = [f for f in families.split(",") if f]
    if refuse & set(wanted):
        print("This probe does not look at the test families: " + ", ".join(sorted(refuse & set(wanted))),
              file=sys.stderr)
        return None
    datasets = sb.recorded_datasets()
    excluded = {f for f in exclude.split(",") if f}
    bad = sorted(excluded - {d.name for d in datasets} | excluded & set(wanted))
    if bad:
        print("Cannot exclude " + ", ".join(bad) + ": not recorded, or held out as well.", file=sys.stderr)
        return None
    datasets = [d for d in datasets if d.name not in excluded]
    unknown = set(wanted) - {d.name for d in datasets}
    if unknown:
        print(f"No recorded H200 records of {', '.join(sorted(unknown))}.", file=sys.stderr)
        return None
    return datasets, [d for d in datasets if d.name in wanted]


def leave_out(datasets: list, held) -> list:
    """Every recorded row but those of `held`: what a model of the held-out family trains on."""
    return [r for d in datasets if d is not held for r in d.rows]


def first_step_gains(train: list, held, seed: int = 0, **model_options) -> np.ndarray:
    """A LearnedSurrogate with the app's ranker weight (and `model_options`) trained on `train`, then each of the
    held-out family's variants scored as a search's first step orders them: expected log improvement over the
    reference (1x)."""
    model = LearnedSurrogate(seed=seed, ranker_weight=APP_WEIGHT, **model_options).fit(
        train, groups=[r["problem_name"] for r in train])
    return np.array([expected_log_improvement(f, 1.0) for f in model.forecast_many(sb._requests(held.rows))])


def family_hits(held):
    """(speedups, target, at target) of a held-out family: its target, or 95% of its best where the vendor's
    is out of reach."""
    speedups = np.array([r["speedup"] for r in held.rows])
    target = held.target if held.reachable else 0.95 * float(speedups.max())
    return speedups, target, speedups >= target


def write_probe(probe: str, script: str, argv, out: str | None, fields: dict) -> Path:
    """A first-pick probe's JSON (its name, the date, the machine, the screen width, the OpenMP threads and
    the command that made it, then `fields`) written to `out`, or benchmarks/results/probe_<probe>_cpu_<date>.json."""
    today = dt.date.today().isoformat()
    data = {"probe": probe, "date": today, "machine": f"cpu ({platform.machine()}), replay of the H200 records",
            "screen": SCREEN, "omp_threads": os.environ.get("OMP_NUM_THREADS"),
            "command": f"OMP_NUM_THREADS=1 python {script} " + " ".join(argv if argv is not None else sys.argv[1:])}
    path = Path(out) if out else ROOT / "benchmarks" / "results" / f"probe_{probe}_cpu_{today}.json"
    path.write_text(json.dumps(data | fields, indent=1) + "\n")
    print(f"\nwrote {path}")
    return path


def ok_speedups(dataset) -> dict:
    return {key: r["speedup"] for key, r in dataset.records.items() if r.get("status") == "ok" and r.get("speedup")}


def screened_first_pick(order_scores: np.ndarray, hits: np.ndarray, draws: int, seed: int = 0) -> float:
    """The share of random SCREEN-variant screens whose top variant by `order_scores` is a hit."""
    rng = np.random.default_rng(seed)
    n = len(order_scores)
    width = min(SCREEN, n)
    found = 0
    for _ in range(draws):
        screen = rng.choice(n, size=width, replace=False)
        found += bool(hits[screen[np.argmax(order_scores[screen])]])
    return found / draws


def first_hit_in_order(order_scores: np.ndarray, hits: np.ndarray) -> int | None:
    """Measuring every variant from the highest score down: the 1-based position of the first hit."""
    for position, index in enumerate(np.argsort(-order_scores, kind="stable"), start=1):
        if hits[index]:
            return position
    return None


def compare(first, second, draws: int) -> dict:
    a, b = ok_speedups(first), ok_speedups(second)
    keys = sorted(set(a) & set(b))
    sa = np.array([a[k] for k in keys])
    sb_ = np.array([b[k] for k in keys])
    log_ratio = np.log(sb_ / sa)
    hashes_same = sum(1 for k in keys if first.records[k].get("source_hash") == second.records[k].get("source_hash"))
    at_a, at_b = sa >= first.target, sb_ >= second.target
    top_a = int(np.argmax(sa))
    return {
        "variants_compared": len(keys),
        "only_in_one": len(set(a) ^ set(b)),
        "same_source": hashes_same,
        "records": [first.source, second.source],
        "reference_ms": [first.reference_ms, second.reference_ms],
        "best": [first.best, second.best],
        "vendor": [(first.vendor or {}).get("speedup"), (second.vendor or {}).get("speedup")],
        "target": [first.target, second.target],
        "log_ratio_median": float(np.median(log_ratio)),
        "log_ratio_sd": float(np.std(log_ratio)),
        "log_ratio_abs_p95": float(np.quantile(np.abs(log_ratio), 0.95)),
        "at_target": [int(at_a.sum()), int(at_b.sum())],
        "at_target_in_both": int((at_a & at_b).sum()),
        "at_target_jaccard": float((at_a & at_b).sum() / max(1, (at_a | at_b).sum())),
        "first_best_in_second": {"over_second_target": float(sb_[top_a] / second.target),
                                 "rank_in_second": int((sb_ > sb_[top_a]).sum()) + 1},
        "random_first_pick_hit_rate": float(at_b.mean()),
        "first_recording_screened_pick_hit_rate": screened_first_pick(sa, at_b, draws),
        "first_recording_order_first_hit": first_hit_in_order(sa, at_b),
    }


def in_family(datasets: list, held, folds: int, draws: int, seed: int = 0) -> dict:
    """Screened first-pick hit rate and first hit of the learned surrogate on `held`: trained without the
    family, and out of fold with `folds - 1` folds of the family added to the other families' rows."""
    from search_engine.surrogates.learned import LearnedSurrogate

    others = [r for d in datasets if d is not held for r in d.rows]
    rows = held.rows
    speedups = np.array([r["speedup"] for r in rows])
    hits = speedups >= held.target

    def expected(train, scored):
        model = LearnedSurrogate(seed=0).fit(train, groups=[r["problem_name"] for r in train])
        return np.array([f.expected_log_speedup() for f in model.forecast_many(sb._requests(scored))])

    without = expected(others, rows)
    fold_of = np.random.default_rng(seed).permutation(len(rows)) % folds
    seen = np.empty(len(rows))
    for fold in range(folds):
        scored = np.flatnonzero(fold_of == fold)
        train = others + [rows[i] for i in np.flatnonzero(fold_of != fold)]
        seen[scored] = expected(train, [rows[i] for i in scored])
    return {name: {"screened_pick_hit_rate": screened_first_pick(s, hits, draws),
                   "first_hit": first_hit_in_order(s, hits), "spearman": float(spearmanr(s, speedups)[0])}
            for name, s in (("family_unseen", without), (f"family_seen_{folds - 1}_of_{folds}_folds", seen))}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--second", type=Path, default=SECOND, help="folder of the second recording")
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--in-family", action="store_true", help="also train the learned surrogate with and without "
                        "the family (slow)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    firsts = {d.name: d for d in sb.recorded_datasets()}
    seconds = {d.name: d for d in sb.recorded_datasets(records_dir=args.second)
               if d.source != firsts[d.name].source}
    families = {name: compare(firsts[name], seconds[name], args.draws) for name in sorted(seconds)}
    print(f"{'family':13s}{'n':>6s}{'log ratio med':>14s}{'sd':>7s}{'|p95|':>7s}{'target 1st/2nd':>16s}"
          f"{'at target 1st/2nd/both':>24s}{'random':>8s}{'by 1st':>8s}{'order':>7s}")
    for name, f in families.items():
        print(f"{name:13s}{f['variants_compared']:6d}{f['log_ratio_median']:+14.4f}{f['log_ratio_sd']:7.4f}"
              f"{f['log_ratio_abs_p95']:7.4f}{f['target'][0]:8.3f}/{f['target'][1]:<7.3f}"
              f"{f['at_target'][0]:>12d}/{f['at_target'][1]}/{f['at_target_in_both']:<5d}"
              f"{f['random_first_pick_hit_rate']:8.2f}{f['first_recording_screened_pick_hit_rate']:8.2f}"
              f"{f['first_recording_order_first_hit']:7d}")
    if args.in_family:
        datasets = list(firsts.values())
        print("\nThe learned surrogate on the first recording, without the family and out of fold with it "
              "(screened first-pick hit rate, first hit, Spearman):")
        for name in families:
            families[name]["learned"] = in_family(datasets, firsts[name], args.folds, args.draws)
            cells = "   ".join(f"{k}: {v['screened_pick_hit_rate']:.2f} {v['first_hit']!s:>4s} {v['spearman']:+.2f}"
                               for k, v in families[name]["learned"].items())
            print(f"{name:13s} {cells}", flush=True)
    output = {
        "probe": "recording_noise", "date": dt.date.today().isoformat(),
        "machine": "cpu (analysis of two H200 recordings)", "python": platform.python_version(),
        "command": "python benchmarks/probes/cpu_2026-12-03/recording_noise.py " + " ".join(argv or sys.argv[1:]),
        "second_recording": sb._shown(args.second), "screen": SCREEN, "draws": args.draws,
        "target_fraction": sb.target_fraction(), "families": families,
    }
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / "probe_recording_noise_h200_2026-12-03.json"
    out.write_text(json.dumps(output, indent=1))
    print(f"wrote {sb._shown(out)}")
    return output


if __name__ == "__main__":
    main()
