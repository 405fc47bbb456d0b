"""The learned surrogate on leave-one-problem-out recorded data, before and after recalibration, beside a
random ranking (and the roofline heuristic, a uniform forecast, and the learned surrogate on random
5-fold splits where every problem is seen in training, for scale).

    .venv/bin/python benchmarks/lab_loo.py                         # kernellab/problems/*/records/h200.jsonl.gz
    .venv/bin/python benchmarks/lab_loo.py --dataset data/lab.jsonl    # an exported dataset
    .venv/bin/python benchmarks/lab_loo.py --records-file sgemm=PATH ... # other recorded files of bundled problems

Each problem's rows are forecast by a learned surrogate trained on the other problems only; the
temperature and isotonic recalibrations of a held-out problem are fitted on leave-one-problem-out
forecasts of the other problems (nested), so no held-out row informs its own forecast or calibration.
Discovery detection runs on the recorded variants one knob apart (the template generator's moves),
each problem's pairs forecast by its held-out model (trained on the other problems' rows, and once more
on their rows and pairs, since pairs ask a parent-anchored question). Prints a table and writes
benchmarks/results/lab_loo_cpu_<date>.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from threadpoolctl import threadpool_limits  # noqa: E402

from kernellab.management.commands.export_dataset import records_dataset  # noqa: E402
from search_engine.lab.datasets import read_dataset, row_problem, row_request, training_rows  # noqa: E402
from search_engine.lab.discovery import discovery_report  # noqa: E402
from search_engine.lab.evaluation import evaluate, format_table  # noqa: E402
from search_engine.lab.experiment import dataset_summary, forecast_rows, loo_forecasts, loo_recalibrated  # noqa: E402
from search_engine.surrogates.learned import LearnedSurrogate  # noqa: E402
from search_engine.surrogates.roofline import RooflineSurrogate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _pair_forecasts(rows: list[dict], pairs: list[dict], seed: int, with_pairs: bool = False) -> list:
    """Each problem's pairs forecast by a learned surrogate trained on the other problems' rows (and, with
    with_pairs, the other problems' pairs too: parent-anchored rows like the questions asked here)."""
    out = [None] * len(pairs)
    for name in sorted({p["problem_id"] for p in pairs}):
        train = [r for r in rows if row_problem(r) != name]
        if with_pairs:
            train += [p for p in pairs if p["problem_id"] != name]
        model = LearnedSurrogate(seed=seed).fit(training_rows(train), groups=[row_problem(r) for r in train])
        idx = [i for i, p in enumerate(pairs) if p["problem_id"] == name]
        for i, f in zip(idx, model.forecast_many([row_request(pairs[i]) for i in idx])):
            out[i] = f
    return out


def _kfold_forecasts(rows: list[dict], folds: int, seed: int) -> list:
    """For contrast: random folds over rows, so every problem is seen in training (the search's situation
    once it has measured some of its own candidates), not held out."""
    import random

    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    out = [None] * len(rows)
    for k in range(folds):
        test = set(order[k::folds])
        train = [r for i, r in enumerate(rows) if i not in test]
        model = LearnedSurrogate(seed=seed).fit(training_rows(train), groups=[row_problem(r) for r in train])
        idx = sorted(test)
        for i, f in zip(idx, model.forecast_many([row_request(rows[i]) for i in idx])):
            out[i] = f
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", help="an exported dataset (.jsonl) instead of the recorded files")
    parser.add_argument("--pairs", help="with --dataset: its parent -> child pairs")
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--records-file", action="append", default=[], metavar="PROBLEM=PATH")
    parser.add_argument("--problems-dir", default=str(ROOT / "kernellab" / "problems"))
    parser.add_argument("--max-rows-per-problem", type=int, default=0,
                        help="a seeded sample of at most N rows per problem (0: all)")
    parser.add_argument("--max-pairs", type=int, default=0, help="a seeded sample of at most N pairs (0: all)")
    parser.add_argument("--no-pair-training", action="store_true",
                        help="skip the discovery model that is also trained on the other problems' pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="")
    parser.add_argument("--note", default="", help="a sentence saved with the results (where the data came from)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    if args.dataset:
        rows = read_dataset(args.dataset).rows
        pairs = read_dataset(args.pairs).rows if args.pairs else []
        source = args.dataset
    else:
        extra = []
        for item in args.records_file:
            name, _, path = item.partition("=")
            extra.append((name, Path(path)))
        rows, pairs = records_dataset(problems_dir=Path(args.problems_dir), gpu=args.gpu, extra_files=extra,
                                      log=lambda line: print(line, file=sys.stderr))
        source = "recorded files: " + ", ".join(sorted({r["pack"] for r in rows}))
    if args.max_rows_per_problem:
        import random

        rng = random.Random(args.seed)
        kept = []
        for name in sorted({row_problem(r) for r in rows}):
            mine = [r for r in rows if row_problem(r) == name]
            kept += mine if len(mine) <= args.max_rows_per_problem else rng.sample(mine, args.max_rows_per_problem)
        ids = {r["comparison_id"] for r in kept}
        rows = kept
        pairs = [p for p in pairs if p["pair_id"].split("->")[0] in ids and p["pair_id"].split("->")[1] in ids]
    if args.max_pairs and len(pairs) > args.max_pairs:
        import random

        pairs = random.Random(args.seed).sample(pairs, args.max_pairs)
    if len({row_problem(r) for r in rows}) < 3:
        print("Leave-one-problem-out with nested calibration needs rows of at least three problems; found "
              f"{sorted({row_problem(r) for r in rows})}. Export or record more first.", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows of {len({row_problem(r) for r in rows})} problems, {len(pairs)} one-knob pairs",
          file=sys.stderr)
    log = lambda line: print(line, file=sys.stderr)  # noqa: E731
    timings = {}
    with threadpool_limits(limits=max(1, args.threads)):
        t = time.monotonic()
        make = lambda: LearnedSurrogate(seed=args.seed)  # noqa: E731
        learned = loo_forecasts(rows, make, progress=log)
        timings["loo_s"] = time.monotonic() - t
        t = time.monotonic()
        recal = loo_recalibrated(rows, make, learned, ("temperature", "isotonic"), progress=log)
        timings["nested_calibration_s"] = time.monotonic() - t
        t = time.monotonic()
        pair_forecasts = _pair_forecasts(rows, pairs, args.seed) if pairs else []
        pair_forecasts_trained = (_pair_forecasts(rows, pairs, args.seed, with_pairs=True)
                                  if pairs and not args.no_pair_training else [])
        timings["pairs_s"] = time.monotonic() - t
        t = time.monotonic()
        kfold = _kfold_forecasts(rows, 5, args.seed)
        timings["kfold_s"] = time.monotonic() - t
    roofline = forecast_rows(RooflineSurrogate(), rows)
    columns = [
        ("learned LOO", evaluate(learned, rows)),
        ("+temperature", recal["methods"]["temperature"]["evaluation"]),
        ("+isotonic", recal["methods"]["isotonic"]["evaluation"]),
        ("roofline", evaluate(roofline, rows)),
        ("learned 5-fold*", evaluate(kfold, rows)),
    ]
    table = format_table(columns)
    reference = columns[0][1]["reference_scores"]
    discovery = {}
    if pairs:
        discovery["learned LOO"] = discovery_report(pair_forecasts, pairs)
        if pair_forecasts_trained:
            discovery["learned LOO, also trained on pairs"] = discovery_report(pair_forecasts_trained, pairs)
        discovery["roofline"] = discovery_report(forecast_rows(RooflineSurrogate(), pairs), pairs)
    timings["total_s"] = time.monotonic() - started

    print(table)
    print("* learned 5-fold: random folds over rows, every problem seen in training (for contrast; not held out)")
    print(f"uniform forecast: Brier {reference['uniform']['brier']:.3f}, CRPS {reference['uniform']['crps']:.3f}, "
          f"NLL {reference['uniform']['nll']:.3f}; always bin {reference['majority_bin']}: "
          f"accuracy {reference['majority_accuracy']:.3f}")
    print("per held-out problem (learned LOO): " + "; ".join(
        f"{name} exact {p['exact_accuracy']:.2f} ±1 {p['within_one_accuracy']:.2f}"
        for name, p in columns[0][1]["per_problem"].items()))
    for name, d in discovery.items():
        best = max((r for r in d["by_probability"] if r["precision"] is not None), key=lambda r: r["lift"] or 0,
                   default=None)
        line = f"discovery ({name}): {d['pairs']} pairs, base rate {d['base_rate']:.3f}"
        for r in d["by_probability"]:
            if r["level"] in (0.3, 0.5, 0.7):
                p = "—" if r["precision"] is None else f"{r['precision']:.3f}"
                rc = "—" if r["recall"] is None else f"{r['recall']:.3f}"
                line += f"; P>={r['level']}: precision {p} recall {rc} ({r['flagged']} flagged)"
        if best:
            line += f"; best lift {best['lift']:.2f} at {best['level']}"
        print(line)
    print(f"time: {timings['total_s']:.0f} s")

    today = datetime.date.today().isoformat()
    out = Path(args.out or RESULTS / f"lab_loo_cpu_{today}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "when": today, "cpu": _cpu(),
        "cpus": os.cpu_count(), "threads": args.threads, "source": source, "note": args.note,
        "dataset": dataset_summary("lab_loo", rows), "pairs": len(pairs), "timings_s": timings,
        "table": table, "columns": {title: block for title, block in columns},
        "recalibration": {m: recal["methods"][m]["params"] for m in recal["methods"]},
        "discovery": discovery,
    }
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
