"""Leave-one-family-out forecasts of the recorded template families: cold, then after a run's first measurements.

Issue 20 found the learned surrogate worse than a uniform forecast on a family it was not trained on (Brier 0.469
against 0.4375), most of the error being the new family's level, and asked that a run recalibrate after its first
one or two measurements. The held-out KernelBench benchmark (surrogate_heldout.py) measures that for the program
surrogate; this one measures it for the template families' learned surrogate, as a search uses it:

- each recorded family in turn is held out, and the learned surrogate of the search benchmark's settings
  (search_bench.lopo_model, today's defaults) is trained on every other recorded family;
- cold: its forecasts of every recorded variant of the held-out family that worked;
- after n measured (n = 1, 2, 4 by default): a run measures the n variants the cold forecast ranks first, the
  surrogate learns from them (`learn`, as the search driver calls it), and its forecasts of the family's other
  variants are scored (heldout_eval.after_measurements);
- beside it, on the same rows: a uniform forecast; the roofline heuristic; and the roofline moved to the run's
  level (its log estimate shifted by the mean gap over the same measured variants), the naive way to use a
  measurement.

With --uploaded, each held-out family is also forecast as an uploaded problem's run sees it (no recording:
neither the reference's time nor its counters are known when the run starts, so the app forecasts with the model
trained without the counters, every reference feature unknown):
- uploaded_before: as the app did before 2026-12-06, unknown for the run's whole life;
- uploaded_now: as it does since, the time and the counters the run's first GPU measurement read
  (kernellab/services/reference_measurements.py; here the recording's) taken up from the next step, with the model
  that reads the counters;
- uploaded_uniform: a uniform forecast.
The three are scored on the same rows (the run measures the variants the cold, all-unknown forecast ranks first),
which are not always the rows of the other four.

Brier, CRPS, NLL and ECE per family and their mean over families (each family weighs the same), and the Brier and
ECE over every family's rows pooled, as surrogate_heldout.py pools its tasks' rows. These are
development figures: the template families, the eight test families among them, shaped the features long
before the test families were set apart, so the frozen held-out figures are surrogate_heldout.py's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/surrogate_lopo.py --jobs 2
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.search_bench import _requests, build_parser, cpu_name, lopo_model, recorded_datasets  # noqa: E402
from search_engine import scoring  # noqa: E402
from search_engine.lab.heldout_eval import (  # noqa: E402
    after_measurements, calibration_pairs, probability_block, uniform_forecasts)
from search_engine.surrogates.base import Forecast  # noqa: E402
from search_engine.surrogates.roofline import RooflineSurrogate  # noqa: E402

METRICS = ("brier", "crps", "nll", "ece")
FORECASTERS = ("learned", "uniform", "roofline", "roofline_at_run_level")
UPLOADED = ("uploaded_before", "uploaded_now", "uploaded_uniform")


class RooflineAtRunLevel(RooflineSurrogate):
    """The roofline heuristic, its log estimate moved by the mean gap between the run's measured log speedups
    and its estimates of them: the naive use of the run's measurements, set beside the learned surrogate's."""

    name = "roofline-run-level"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.gap = 0.0

    def learn(self, rows: list[dict]) -> None:
        gaps = [math.log(r["speedup"]) - math.log(max(1e-6, self.estimate_speedup(r["request"])))
                for r in rows if r.get("speedup")]
        self.gap = statistics.fmean(gaps) if gaps else 0.0

    def forecast_many(self, requests) -> list[Forecast]:
        return [Forecast.from_probabilities(self._lognormal(math.log(max(1e-6, self.estimate_speedup(q))) + self.gap),
                                            surrogate=self.id) for q in requests]


_DATASETS: list = []


def scored(forecasts: list[Forecast], rows: list[dict]) -> dict:
    """probability_block's figures, and each row's confidence and whether its bin was right (for the ECE over
    every family's rows together, which main() computes and does not store)."""
    block = probability_block(forecasts, rows)
    block["_confidence"], block["_correct"] = calibration_pairs(forecasts, rows)
    return block


def evaluate_family(name: str, search_args, measured: tuple[int, ...], uploaded: bool = False) -> dict:
    """One held-out family's figures (the worker of --jobs: the datasets are the module's, forked)."""
    held = next(d for d in _DATASETS if d.name == name)
    train = [r for d in _DATASETS if d is not held for r in d.rows]
    requests = _requests(held.rows)
    started = time.perf_counter()
    model = lopo_model(train, search_args, like=requests)
    fit_s = time.perf_counter() - started
    rows = [{"request": q, "speedup": r["speedup"], "task": held.name, "gpu": "recorded"}
            for q, r in zip(requests, held.rows)]
    cold = model.forecast_many(requests)
    roofline = RooflineSurrogate().forecast_many(requests)
    out = {"variants": len(rows), "train_rows": len(train), "fit_s": round(fit_s, 1),
           "cold": {"learned": scored(cold, rows), "uniform": scored(uniform_forecasts(len(rows)), rows),
                    "roofline": scored(roofline, rows), "roofline_at_run_level": scored(roofline, rows)}}
    for n in measured:
        learned, kept, counts = after_measurements(copy.deepcopy(model), rows, cold, measured=n)
        # The same measured variants (the learned surrogate's cold order) and the same rows scored.
        levelled, kept_r, _ = after_measurements(RooflineAtRunLevel(), rows, cold, measured=n)
        assert [id(r) for r in kept] == [id(r) for r in kept_r]
        index = {id(r): i for i, r in enumerate(rows)}
        scored_rows = {id(r) for r in kept}
        out[f"after_{n}"] = {"learned": scored(learned, kept), "uniform": scored(uniform_forecasts(len(kept)), kept),
                             "roofline": scored([roofline[index[id(r)]] for r in kept], kept),
                             "roofline_at_run_level": scored(levelled, kept),
                             "measured_speedups": sorted((r["speedup"] for r in rows if id(r) not in scored_rows),
                                                         reverse=True),
                             "rows": len(kept), **counts}
    if uploaded:
        as_uploaded(out, model, train, requests, rows, search_args, measured)
    return out


def as_uploaded(out: dict, model, train: list[dict], requests: list, rows: list[dict], search_args,
                measured: tuple[int, ...]) -> None:
    """The UPLOADED forecasters' blocks of one held-out family, added to `out`'s stages (see the docstring)."""
    import argparse
    import dataclasses

    bare = [dataclasses.replace(q, reference_ms=None, reference_profile=None) for q in requests]
    bare_rows = [{**r, "request": q} for r, q in zip(rows, bare)]
    without = lopo_model(train, argparse.Namespace(**{**vars(search_args), "reference_profile": False}), like=bare)
    cold = without.forecast_many(bare)
    out["cold"].update(uploaded_before=scored(cold, bare_rows), uploaded_now=scored(cold, bare_rows),
                       uploaded_uniform=scored(uniform_forecasts(len(rows)), bare_rows))
    for n in measured:
        before, kept, _ = after_measurements(copy.deepcopy(without), bare_rows, cold, measured=n)
        # the same variants measured (the cold forecast's order), learned from with what the run now knows
        now, kept_now, _ = after_measurements(copy.deepcopy(model), rows, cold, measured=n)
        assert [r["request"].candidate for r in kept] == [r["request"].candidate for r in kept_now]
        out[f"after_{n}"].update(uploaded_before=scored(before, kept), uploaded_now=scored(now, kept_now),
                                 uploaded_uniform=scored(uniform_forecasts(len(kept)), kept))


def forecasters(families: dict) -> tuple[str, ...]:
    first = next(iter(families.values()))["cold"]
    return FORECASTERS + tuple(f for f in UPLOADED if f in first)


def summary(families: dict, stage: str) -> dict:
    """Each forecaster's mean of each metric over the families, and how many families the learned surrogate
    beats each other forecaster on (lower is better for every metric here)."""
    out = {}
    if "uploaded_now" in next(iter(families.values()))[stage]:
        out["uploaded_now_beats"] = {
            other: {m: sum(f[stage]["uploaded_now"][m] < f[stage][other][m] for f in families.values())
                    for m in METRICS} for other in ("uploaded_before", "uploaded_uniform")}
    for forecaster in forecasters(families):
        out[forecaster] = {m: statistics.fmean(f[stage][forecaster][m] for f in families.values()) for m in METRICS}
    out["learned_beats"] = {other: {m: sum(f[stage]["learned"][m] < f[stage][other][m] for f in families.values())
                                    for m in METRICS} for other in FORECASTERS[1:]}
    # Every family's rows together, as surrogate_heldout.py pools its tasks' rows: a family's own ECE also
    # counts how far its level is from the forecast's, which pooling partly averages out.
    out["pooled"] = {}
    for forecaster in forecasters(families):
        blocks = [f[stage][forecaster] for f in families.values()]
        rows = sum(b["rows"] for b in blocks)
        out["pooled"][forecaster] = {
            "rows": rows, "brier": sum(b["brier"] * b["rows"] for b in blocks) / rows,
            "ece": scoring.ece([c for b in blocks for c in b["_confidence"]], [k for b in blocks for k in b["_correct"]])}
    out["families"] = len(families)
    return out


def measured_counts(text: str) -> tuple[int, ...]:
    """--measured: the run's first measurements to learn from, whole numbers of at least 1 separated by commas
    (each once, in the order given); ValueError in one sentence otherwise."""
    try:
        counts = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        counts = (0,)
    if any(n < 1 for n in counts):
        raise ValueError(f"--measured takes whole numbers of at least 1 separated by commas (such as 1,2,4), "
                         f"not {text!r}.")
    return tuple(dict.fromkeys(counts))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="", help="comma-separated families to hold out (default: every one)")
    parser.add_argument("--records-dir", type=Path, default=None,
                        help="another recording of the families (as search_bench.py --records-dir)")
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--measured", default="1,2,4",
                        help="the run's first measurements to learn from, comma-separated (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=1, help="families evaluated at once (processes)")
    parser.add_argument("--uploaded", action="store_true",
                        help="also forecast each family as an uploaded problem's run sees it, before and since its "
                             "reference is measured by the run (uploaded_before / uploaded_now)")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / f"surrogate_lopo_cpu_{dt.date.today():%Y-%m-%d}.json")
    args = parser.parse_args(argv)
    if args.out.is_dir():  # found only at the end, after every family was trained, it lost the run
        parser.error(f"--out {args.out} is a folder; give a file name (.json)")
    try:
        measured = measured_counts(args.measured)
    except ValueError as exc:
        parser.error(str(exc))
    search_args = build_parser().parse_args(["--model-seed", str(args.model_seed)])
    _DATASETS[:] = [d for d in recorded_datasets(records_dir=args.records_dir) if d.rows]
    if not _DATASETS:
        raise SystemExit("No recorded families were found (kernellab/problems/*/records/h200.jsonl.gz).")
    names = [d.name for d in _DATASETS]
    wanted = [n for n in args.families.split(",") if n] or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise SystemExit(f"--families: {', '.join(unknown)} not recorded; recorded: {', '.join(names)}")
    started = time.time()
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.starmap(evaluate_family, [(n, search_args, measured, args.uploaded) for n in wanted])
    else:
        results = [evaluate_family(n, search_args, measured, args.uploaded) for n in wanted]
    families = dict(zip(wanted, results))
    stages = ["cold"] + [f"after_{n}" for n in measured]
    result = {
        "name": "surrogate_lopo", "date": f"{dt.date.today():%Y-%m-%d}", "machine": "cpu", "cpu": cpu_name(),
        "python": platform.python_version(),
        "command": "python benchmarks/surrogate_lopo.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "records_dir": str(args.records_dir) if args.records_dir else None, "model_seed": args.model_seed,
        "note": "development figures: every recorded template family held out in turn, the learned surrogate of "
                "the search benchmark's settings trained on the others; after_n: the n variants the cold forecast "
                "ranks first measured and learned from, the family's other variants scored. The frozen held-out "
                "figures are surrogate_heldout.py's",
        "summary": {stage: summary(families, stage) for stage in stages},
        "families": families, "seconds": round(time.time() - started, 1),
    }
    for fam in families.values():
        for stage in stages:
            for block in fam[stage].values():
                if isinstance(block, dict):
                    block.pop("_confidence", None)
                    block.pop("_correct", None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print_table(result, stages)
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return result


def print_table(result: dict, stages: list[str]) -> None:
    families = result["families"]
    shown = forecasters(families)
    print(f"{'family':<18}{'stage':<9}" + "".join(f"{f + ' Brier':>28}" for f in shown))
    for name, fam in families.items():
        for stage in stages:
            print(f"{name:<18}{stage:<9}" + "".join(f"{fam[stage][f]['brier']:>28.3f}" for f in shown))
    print()
    print(f"{'mean over ' + str(len(families)) + ' families':<32}" + "".join(f"{m:>9}" for m in METRICS)
          + "   learned beats (Brier): uniform / roofline / roofline at run level")
    for stage in stages:
        block = result["summary"][stage]
        for forecaster in shown:
            beats = ""
            if forecaster == "learned":
                b = block["learned_beats"]
                beats = (f"   {b['uniform']['brier']} / {b['roofline']['brier']} / "
                         f"{b['roofline_at_run_level']['brier']} of {block['families']}")
            elif forecaster == "uploaded_now":
                b = block["uploaded_now_beats"]
                beats = (f"   beats uploaded_before on {b['uploaded_before']['brier']}, uniform on "
                         f"{b['uploaded_uniform']['brier']} of {block['families']}")
            print(f"{stage + ' ' + forecaster:<32}" + "".join(f"{block[forecaster][m]:>9.3f}" for m in METRICS) + beats)
    print()
    print(f"{'every family' + chr(39) + 's rows pooled':<32}{'brier':>9}{'ece':>9}{'rows':>9}")
    for stage in stages:
        for forecaster in shown:
            pooled = result["summary"][stage]["pooled"][forecaster]
            print(f"{stage + ' ' + forecaster:<32}{pooled['brier']:>9.3f}{pooled['ece']:>9.3f}{pooled['rows']:>9}")


if __name__ == "__main__":
    main()
