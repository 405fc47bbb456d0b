"""Search benchmark on recorded H200 data (replay), or on synthetic records until those exist.

  .venv/bin/python benchmarks/search_bench.py [--seeds 10] [--families a,b] [--quick]

Part 1 — GPU measurements needed to reach 95% of the best recorded speedup of each family, over
seeds: surrogate-assisted PUCT (learned surrogate trained leave-one-problem-out, retrained online;
it screens --root-children forecast candidates at the root, and is also run without screening),
PUCT that measures every candidate, random sampling, and Kernel Tuner's strategies in simulation
mode on a cache file made from the same records. A variant that fails to compile costs no GPU
measurement in any method (it never reaches the GPU).
Part 2 — the learned surrogate leave-one-problem-out: exact and ±1-bin accuracy, Brier, CRPS, ECE,
AURC, recovered speedup at top 1/5/10/50%, against a random ranking and the roofline heuristic.

Prints tables and writes benchmarks/results/search_<cpu>_<date>.json.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import gzip
import importlib.util
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from search_engine import scoring  # noqa: E402
from search_engine.bins import DEFAULT_BINS  # noqa: E402
from search_engine.driver import SearchDriver  # noqa: E402
from search_engine.search_settings import SearchSettings  # noqa: E402
from search_engine.generators.template import KnobSpace, TemplateGenerator  # noqa: E402
from search_engine.policy import PolicySettings  # noqa: E402
from search_engine.surrogates.base import ForecastRequest  # noqa: E402
from search_engine.surrogates.learned import LearnedSurrogate  # noqa: E402
from search_engine.surrogates.roofline import RooflineSurrogate  # noqa: E402
from search_engine.tree import TreeOptions  # noqa: E402

KT_STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "bayes_opt", "greedy_ils", "pso")
TARGET_FRACTION = 0.95
_TARGET = {"fraction": TARGET_FRACTION}


def target_fraction() -> float:
    return _TARGET["fraction"]


# ---- datasets ---------------------------------------------------------------------------------

@dataclass
class Dataset:
    name: str
    knobs: dict
    records: dict  # knob tuple -> record
    render: object  # knobs -> Candidate dict
    reference: dict
    hardware: dict
    problem: dict
    reference_ms: float | None
    synthetic: bool
    rows: list = field(default_factory=list)  # ok variants as surrogate rows
    constraints: list = field(default_factory=list)  # knob constraints with the sizes filled in

    def key(self, knobs: dict) -> tuple:
        return tuple(knobs[n] for n in self.knobs)

    @property
    def best(self) -> float:
        return max(r["speedup"] for r in self.records.values() if r.get("status") == "ok")

    @property
    def target(self) -> float:
        return target_fraction() * self.best

    def gpu_cost(self, record: dict) -> bool:
        return record.get("status") != "failed-compile"


def _rows(dataset: Dataset) -> list[dict]:
    rows = []
    for record in dataset.records.values():
        if record.get("status") != "ok":
            continue
        rows.append({"reference": dataset.reference, "candidate": dataset.render(record["knobs"]),
                     "hardware": dataset.hardware, "problem": dataset.problem,
                     "compiler_facts": record.get("compiler"), "reference_ms": dataset.reference_ms,
                     "speedup": record["speedup"], "problem_name": dataset.name})
    return rows


def _with_sizes(constraint: str, sizes: dict) -> str:
    for name, value in sizes.items():
        constraint = re.sub(rf"\b{re.escape(name)}\b", str(value), constraint)
    return constraint


def synthetic_datasets() -> list[Dataset]:
    from benchmarks import search_synthetic as syn

    out = []
    for family in syn.FAMILIES:
        records = syn.records(family)
        ds = Dataset(
            name=family.name, knobs=family.knobs,
            records={tuple(r["knobs"][n] for n in family.knobs): r for r in records},
            render=lambda knobs, f=family: syn.render(f, knobs), reference=syn.reference(family),
            hardware=syn.H200, problem=syn.problem_dict(family), reference_ms=family.reference_ms, synthetic=True,
            constraints=[_with_sizes(c, family.sizes) for c in family.constraints])
        ds.rows = _rows(ds)
        out.append(ds)
    return out


def recorded_datasets(gpu: str = "h200") -> list[Dataset]:
    """Bundled problems with recorded measurements (kernellab/problems/<name>/records/<gpu>.jsonl.gz)."""
    problems = ROOT / "kernellab" / "problems"
    tool = problems / "tools" / "variants.py"
    if not tool.exists():
        return []
    spec = importlib.util.spec_from_file_location("kernellab_variants", tool)
    variants = importlib.util.module_from_spec(spec)
    sys.modules["kernellab_variants"] = variants
    spec.loader.exec_module(variants)
    out = []
    for folder in sorted(p.parent for p in problems.glob("*/problem.toml")):
        path = folder / "records" / f"{gpu}.jsonl.gz"
        if not path.exists():
            continue
        problem = variants.load(folder)
        if not problem.family:
            continue
        with gzip.open(path, "rt") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        family_records = {}
        hardware, reference_ms, reference_facts = {}, None, None
        for record in records:
            hardware = hardware or record.get("hardware") or {}
            reference_ms = reference_ms or (record.get("reference") or {}).get("median_ms")
            if record.get("variant") == "reference":
                reference_facts = record.get("compiler")
            if record.get("knobs"):
                family_records[tuple(record["knobs"][n] for n in problem.family["knobs"])] = record
        case = problem.sizes[next(iter(problem.sizes))]
        roofline = problem.spec.get("roofline") or {}
        reference = {"source": problem.reference_source(), "launch": problem.spec["launch"], "temps": [],
                     "compile_options": [], "knobs": None, "name": "reference"}

        def render(knobs, problem=problem):
            v = problem.render(knobs)
            return {"source": v.source, "launch": v.launch, "temps": v.temps, "compile_options": [],
                    "knobs": dict(knobs), "name": v.label}

        ds = Dataset(name=problem.name, knobs=problem.family["knobs"], records=family_records, render=render,
                     reference=reference, hardware=hardware,
                     problem={"name": problem.name, "sizes": case, "roofline": roofline,
                              "tolerance": problem.spec.get("tolerance") or {}},
                     reference_ms=reference_ms, synthetic=False,
                     constraints=[_with_sizes(c, case) for c in problem.family.get("constraints", [])])
        ds.rows = _rows(ds)
        if reference_facts:
            for row in ds.rows:
                row["reference_compiler_facts"] = reference_facts
        out.append(ds)
    return out


# ---- replay port ----------------------------------------------------------------------------

class ReplayPort:
    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.measurements = 0
        self.reached_at: int | None = None
        self.best = 0.0
        self.events = 0

    def _record(self, candidate):
        return self.dataset.records[self.dataset.key(candidate["knobs"])]

    def compile(self, node_id, candidate):
        record = self._record(candidate)
        if record.get("status") == "failed-compile":
            return {"status": "failed-compile", "reason": record.get("reason", ""), "compiler": None}
        return {"status": "ok", "reason": "", "compiler": record.get("compiler")}

    def request_measurement(self, node_id, candidate):
        record = self._record(candidate)
        self.measurements += 1
        if record.get("status") == "ok":
            self.best = max(self.best, record["speedup"])
            if self.reached_at is None and record["speedup"] >= self.dataset.target:
                self.reached_at = self.measurements
        return {k: record.get(k) for k in ("status", "reason", "speedup", "reference", "candidate", "compiler")}

    def publish(self, event):
        self.events += 1


def knob_space(dataset: Dataset) -> KnobSpace:
    names = list(dataset.knobs)
    return KnobSpace(dataset.knobs, points=[dict(zip(names, key)) for key in dataset.records])


def run_puct(dataset: Dataset, seed: int, surrogate, measure_all: bool, args, root_children: int = 0) -> dict:
    port = ReplayPort(dataset)
    policy = PolicySettings(threshold=args.threshold, gpu_budget=len(dataset.records),
                            max_gpu_per_step=args.gpu_per_step, measure_all=measure_all,
                            min_gpu_per_step=0 if measure_all else args.min_gpu_per_step,
                            min_beat_prob=args.min_beat_prob,
                            conformal_target=args.conformal if args.conformal > 0 else None)
    if surrogate is not None and hasattr(surrogate, "online_weight"):
        surrogate.online_weight = args.online_weight
    settings = SearchSettings(policy=policy, tree=TreeOptions(c=args.c, log_rewards=True),
                              children_per_expansion=args.children, root_children=root_children, seed=seed,
                              retrain_every=args.retrain_every)
    driver = SearchDriver(port=port, generator=TemplateGenerator(knob_space(dataset), dataset.render),
                          surrogate=surrogate, reference=dataset.reference, hardware=dataset.hardware,
                          problem=dataset.problem, settings=settings, reference_ms=dataset.reference_ms)
    steps = 0
    while port.reached_at is None and steps < args.max_steps:
        report = driver.step()
        steps += 1
        if report.status != "expanded":
            break
    return {"measurements": port.reached_at, "spent": port.measurements, "forecasts": driver.counters.forecasts,
            "nodes": len(driver.tree.nodes), "best": port.best}


def measurements_to_target(dataset: Dataset, records) -> dict:
    """Measuring records in this order (failed compiles cost nothing): the count that first reaches the target."""
    spent = 0
    for record in records:
        if not dataset.gpu_cost(record):
            continue
        spent += 1
        if record.get("status") == "ok" and record["speedup"] >= dataset.target:
            return {"measurements": spent, "spent": spent}
    return {"measurements": None, "spent": spent}


def run_random(dataset: Dataset, seed: int) -> dict:
    order = list(dataset.records.values())
    random.Random(seed).shuffle(order)
    return measurements_to_target(dataset, order)


def kt_cache(dataset: Dataset, folder: Path) -> Path:
    names = list(dataset.knobs)
    cache = {}
    for key, record in dataset.records.items():
        entry = dict(zip(names, key))
        timing = dict(compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
        if record.get("status") == "ok":
            t = (dataset.reference_ms or 1.0) / record["speedup"]
            entry.update(time=t, times=[t], **timing)
        else:
            error = "CompilationFailedConfig" if record.get("status") == "failed-compile" else "RuntimeFailedConfig"
            entry.update(time=error, **timing)
        cache[",".join(str(v) for v in key)] = entry
    if dataset.constraints:
        from kernel_tuner.searchspace import Searchspace

        for point in Searchspace(dataset.knobs, list(dataset.constraints), 1 << 30).list:
            key = ",".join(str(v) for v in point)
            if key not in cache:
                cache[key] = {**dict(zip(names, point)), "time": "InvalidConfig", "compile_time": 0.0,
                              "verification_time": 0.0, "benchmark_time": 0.0}
    path = folder / f"{dataset.name}.json"
    path.write_text(json.dumps({"device_name": "replay", "kernel_name": "family", "problem_size": [1],
                                "tune_params_keys": names, "tune_params": dataset.knobs, "objective": "time",
                                "cache": cache}))
    return path


def run_kernel_tuner(dataset: Dataset, strategy: str, seed: int, cache_path: Path, time_limit_s: float = 60.0) -> dict:
    import kernel_tuner

    names = list(dataset.knobs)
    recorded = set(dataset.records)
    def recorded_only(params):  # a def, not a lambda: Kernel Tuner parses lambdas' source text
        return tuple(params[n] for n in names) in recorded

    random.seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            "family", "", (1,), [], dataset.knobs,
            # The family's constraints let Kernel Tuner build the space without walking the whole
            # knob product (valid variants that were not recorded sit in the cache as invalid).
            restrictions=list(dataset.constraints) if dataset.constraints else recorded_only,
            cache=str(cache_path), simulation_mode=True, strategy=strategy,
            # Wall-clock limit per run: greedy_ils walks sgemm's constrained space very slowly.
            strategy_options={"max_fevals": len(recorded), "time_limit": time_limit_s}, quiet=True, verbose=False)
    # Kernel Tuner's evaluations in order, each configuration once; one that is valid by the
    # constraints but was never recorded is an invalid configuration to Kernel Tuner and costs nothing.
    keys = dict.fromkeys(tuple(result[n] for n in names) for result in results if result)
    return measurements_to_target(dataset, [dataset.records[k] for k in keys if k in dataset.records])


# ---- surrogate evaluation -------------------------------------------------------------------------

def _requests(rows):
    return [ForecastRequest(reference=r["reference"], candidate=r["candidate"], hardware=r["hardware"],
                            problem=r["problem"], compiler_facts=r.get("compiler_facts"),
                            reference_compiler_facts=r.get("reference_compiler_facts"),
                            reference_ms=r.get("reference_ms")) for r in rows]


def forecast_metrics(forecasts, rows, scores) -> dict:
    truth = [DEFAULT_BINS.bin_of(r["speedup"]) for r in rows]
    speedups = [r["speedup"] for r in rows]
    probabilities = [f.probabilities for f in forecasts]
    conf = [f.confidence for f in forecasts]
    correct = [f.bin == t for f, t in zip(forecasts, truth)]
    out = {
        "n": len(rows),
        "exact_accuracy": float(np.mean(correct)),
        "within_one_accuracy": float(np.mean([abs(f.bin - t) <= 1 for f, t in zip(forecasts, truth)])),
        "brier": float(np.mean([scoring.brier(p, t) for p, t in zip(probabilities, truth)])),
        "crps": float(np.mean([scoring.crps(p, t) for p, t in zip(probabilities, truth)])),
        "nll": float(np.mean([scoring.nll(p, t) for p, t in zip(probabilities, truth)])),
        "ece": scoring.ece(conf, correct),
        "aurc": scoring.aurc(conf, [0.0 if c else 1.0 for c in correct]),
        "risk_at_50pct_coverage": scoring.risk_at_coverage(conf, [0.0 if c else 1.0 for c in correct], 0.5),
    }
    for k in (0.01, 0.05, 0.10, 0.50):
        out[f"recovered_top_{int(k * 100)}pct"] = scoring.recovered_speedup_at_top(scores, speedups, k)
    # Zero-shot: measuring in the order of the scores, the measurement that first reaches the target.
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    hits = np.asarray(speedups)[order] >= target_fraction() * max(speedups)
    out["first_hit_rank"] = int(np.argmax(hits)) + 1
    return out


def random_ranking(rows, draws: int = 200) -> dict:
    speedups = [r["speedup"] for r in rows]
    out = {}
    for k in (0.01, 0.05, 0.10, 0.50):
        out[f"recovered_top_{int(k * 100)}pct"] = float(np.mean([
            scoring.recovered_speedup_at_top(np.zeros(len(rows)), speedups, k, seed=s) for s in range(draws)]))
    share = np.mean(np.asarray(speedups) >= target_fraction() * max(speedups))
    out["first_hit_rank"] = float((len(rows) + 1) / (share * len(rows) + 1))  # expected, without replacement
    uniform = [1 / 8] * 8
    truth = [DEFAULT_BINS.bin_of(s) for s in speedups]
    out["brier"] = float(np.mean([scoring.brier(uniform, t) for t in truth]))
    out["crps"] = float(np.mean([scoring.crps(uniform, t) for t in truth]))
    return out


def lopo_surrogates(datasets: list[Dataset], args) -> tuple[dict, dict]:
    """Per held-out dataset: the learned surrogate trained on the others, and the evaluation."""
    models, evaluation = {}, {}
    for held in datasets:
        train = [r for d in datasets if d is not held for r in d.rows]
        started = time.perf_counter()
        model = LearnedSurrogate(seed=0).fit(train, groups=[r["problem_name"] for r in train])
        fit_s = time.perf_counter() - started
        models[held.name] = model
        requests = _requests(held.rows)
        started = time.perf_counter()
        forecasts = model.forecast_many(requests)
        rate = len(requests) / (time.perf_counter() - started)
        scores = [f.expected_log_speedup() for f in forecasts]
        learned = forecast_metrics(forecasts, held.rows, scores)
        # The same with a run-local model learned from 20 of the held-out rows (what a run forecasts with).
        online = copy.deepcopy(model)
        online.learn([{"request": q, "speedup": r["speedup"]} for q, r in zip(requests[:20], held.rows[:20])])
        started = time.perf_counter()
        online.forecast_many(requests)
        rate_online = len(requests) / (time.perf_counter() - started)
        learned.update(fit_s=fit_s, forecasts_per_s=rate, forecasts_per_s_with_run_model=rate_online,
                       temperature=model.temperature, train_rows=len(train))
        roof = RooflineSurrogate()
        roof_forecasts = roof.forecast_many(requests)
        roofline = forecast_metrics(roof_forecasts, held.rows, [roof.estimate_speedup(q) for q in requests])
        evaluation[held.name] = {"learned": learned, "roofline": roofline, "random": random_ranking(held.rows)}
    return models, evaluation


# ---- reporting ------------------------------------------------------------------------------------

def summarise(values: list) -> dict:
    reached = [v for v in values if v is not None]
    return {"median": statistics.median(reached) if reached else None,
            "mean": statistics.fmean(reached) if reached else None,
            "reached": len(reached), "runs": len(values), "values": values}


def bootstrap_verdicts(search: dict, strategies: list[str], statistic: str, draws: int = 4000, seed: int = 0) -> dict:
    """How sure the verdicts are: the seeds of every method resampled with replacement, together for
    all families in each draw. Per family, a 95% interval of measure-all / surrogate and the share of
    draws where it is >= 3 or where the surrogate needs fewer than the best Kernel Tuner strategy; over
    families, the share of draws where each holds on most of them (more than half)."""
    rng = np.random.default_rng(seed)
    stat = np.median if statistic == "median" else np.mean

    def values(summary):
        return np.array([v for v in summary["values"] if v is not None], dtype=float)

    families = {}
    for name, results in search.items():
        kts = [values(results[f"kt_{s}"]) for s in strategies]
        families[name] = (values(results["puct_surrogate"]), values(results["puct_measure_all"]),
                          [v for v in kts if len(v)])
    ratios = {name: np.full(draws, np.nan) for name in families}
    beats = {name: np.zeros(draws, dtype=bool) for name in families}
    for i in range(draws):
        for name, (sur, allm, kts) in families.items():
            if not len(sur):
                continue
            s = stat(rng.choice(sur, len(sur)))
            if len(allm):
                ratios[name][i] = stat(rng.choice(allm, len(allm))) / s
            if kts:
                beats[name][i] = min(stat(rng.choice(k, len(k))) for k in kts) > s
    most = len(families) // 2 + 1
    three_count = sum((np.nan_to_num(r) >= 3).astype(int) for r in ratios.values())
    beat_count = sum(b.astype(int) for b in beats.values())
    out = {"statistic": statistic, "draws": draws, "most": most, "families": {}}
    for name in families:
        r = ratios[name]
        ok = r[~np.isnan(r)]
        out["families"][name] = {
            "measure_all_over_surrogate_95": [float(np.percentile(ok, 2.5)), float(np.percentile(ok, 97.5))] if len(ok) else None,
            "p_three_times": float(np.mean(np.nan_to_num(r) >= 3)),
            "p_fewer_than_best_kt": float(np.mean(beats[name]))}
    out["p_three_times_on_most"] = float(np.mean(three_count >= most))
    out["p_fewer_than_best_kt_on_most"] = float(np.mean(beat_count >= most))
    return out


def fmt(x, width=9, digits=1):
    if x is None:
        return "—".rjust(width)
    return f"{x:{width}.{digits}f}"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return re.sub(r"[^a-z0-9]+", "-", line.split(":", 1)[1].strip().lower()).strip("-")
    except OSError:
        pass
    return re.sub(r"[^a-z0-9]+", "-", (platform.processor() or platform.machine()).lower())


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--families", default="")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic records even if real ones exist")
    parser.add_argument("--kt", default=",".join(KT_STRATEGIES))
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--gpu-per-step", type=int, default=2)
    parser.add_argument("--children", type=int, default=16,
                        help="children per expansion (template neighbours are cheap to forecast)")
    parser.add_argument("--root-children", type=int, default=256,
                        help="children the surrogate PUCT screens at the root (0: --children); measure-all uses --children")
    parser.add_argument("--min-gpu-per-step", type=int, default=1,
                        help="measurements a surrogate step makes when no candidate clears --min-beat-prob")
    parser.add_argument("--c", type=float, default=1.0)
    parser.add_argument("--retrain-every", type=int, default=5)
    parser.add_argument("--min-beat-prob", type=float, default=0.15)
    parser.add_argument("--conformal", type=float, default=0.2,
                        help="target error rate of accepted forecasts (0: the fixed threshold only)")
    parser.add_argument("--online-weight", type=float, default=10.0)
    parser.add_argument("--skip-baselines", action="store_true", help="only the surrogate-assisted PUCT")
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--target", type=float, default=TARGET_FRACTION, help="fraction of the best speedup to reach")
    parser.add_argument("--kt-time-limit", type=float, default=30.0,
                        help="wall-clock seconds per Kernel Tuner run (an unfinished run counts as not reached)")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    _TARGET["fraction"] = args.target

    datasets = [] if args.synthetic else recorded_datasets()
    synthetic = not datasets
    if synthetic:
        print("NOTE: no recorded H200 datasets (kernellab/problems/*/records/h200.jsonl.gz) were found;"
              " these figures come from SYNTHETIC records (benchmarks/search_synthetic.py), not from a GPU.\n")
        datasets = synthetic_datasets()
    if args.families:
        wanted = set(args.families.split(","))
    else:
        wanted = {d.name for d in datasets}
    all_datasets = datasets
    strategies = [s for s in args.kt.split(",") if s]
    started = time.time()

    print("Training the learned surrogate leave-one-problem-out ...", flush=True)
    models, evaluation = lopo_surrogates(all_datasets, args)

    search = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in [d for d in all_datasets if d.name in wanted]:
            print(f"\n{dataset.name}: {len(dataset.records)} variants, best {dataset.best:.3g}x, "
                  f"target {dataset.target:.3g}x", flush=True)
            results = {}
            # The surrogate PUCT screens root_children candidates at the root (forecasts are cheap),
            # and, for comparison, the same search without screening.
            configs = [("puct_surrogate", args.root_children)]
            if args.root_children and not args.skip_baselines:
                configs.append(("puct_surrogate_unscreened", 0))
            for method, root_children in configs:
                t0 = time.time()
                runs = [run_puct(dataset, s, copy.deepcopy(models[dataset.name]), False, args, root_children)
                        for s in range(args.seeds)]
                results[method] = summarise([r["measurements"] for r in runs]) | {
                    "forecasts_mean": statistics.fmean(r["forecasts"] for r in runs), "seconds": time.time() - t0,
                    "root_children": root_children}
            if args.skip_baselines:
                search[dataset.name] = results
                print(f"  puct_surrogate median {fmt(results['puct_surrogate']['median'])} "
                      f"values {results['puct_surrogate']['values']}", flush=True)
                continue
            t0 = time.time()
            runs = [run_puct(dataset, s, None, True, args) for s in range(args.seeds)]
            results["puct_measure_all"] = summarise([r["measurements"] for r in runs]) | {"seconds": time.time() - t0}
            results["random"] = summarise([run_random(dataset, s)["measurements"] for s in range(args.seeds)])
            cache = kt_cache(dataset, Path(tmp))
            for strategy in strategies:
                t0 = time.time()
                runs = [run_kernel_tuner(dataset, strategy, s, cache, args.kt_time_limit)["measurements"]
                        for s in range(args.seeds)]
                results[f"kt_{strategy}"] = summarise(runs) | {"seconds": time.time() - t0}
            search[dataset.name] = results
            partial = ROOT / "benchmarks" / "results" / ".search_partial.json"
            partial.write_text(json.dumps({"search": search, "surrogate_lopo": evaluation}, indent=1, default=float))
            for method, summary in results.items():
                print(f"  {method:26s} median {fmt(summary['median'])}  mean {fmt(summary['mean'])}  "
                      f"reached {summary['reached']}/{summary['runs']}", flush=True)

    if args.skip_baselines:
        return {"search": search}
    print(f"\nGPU measurements to reach {args.target:.0%} of the best speedup, median then mean over seeds "
          f"(— = not reached in any run; sur: the surrogate PUCT screening {args.root_children} at the root, "
          f"unscr: the same without screening)")
    methods = ["puct_surrogate"] + (["puct_surrogate_unscreened"] if args.root_children else []) + \
        ["puct_measure_all", "random"] + [f"kt_{s}" for s in strategies]
    verdicts, bootstrap = {}, {}
    for statistic in ("median", "mean"):
        print(f"{'family':18s}" + "".join(f"{m.replace('puct_surrogate', 'sur').replace('unscreened', 'unscr')[:12]:>13s}"
                                          for m in methods) + f"{'all/sur':>9s}{'bestKT/sur':>11s}   ({statistic})")
        for name, results in search.items():
            cells = "".join(fmt(results[m][statistic], 13) for m in methods)
            sur = results["puct_surrogate"][statistic]
            allm = results["puct_measure_all"][statistic]
            kts = {s: results[f"kt_{s}"][statistic] for s in strategies if results[f"kt_{s}"][statistic] is not None}
            best_kt = min(kts.values()) if kts else None
            ratio_all = allm / sur if sur and allm else None
            ratio_kt = best_kt / sur if sur and best_kt else None
            verdicts.setdefault(name, {})[statistic] = {
                "measure_all_over_surrogate": ratio_all, "best_kt_over_surrogate": ratio_kt,
                "best_kt_strategy": min(kts, key=kts.get) if kts else None}
            print(f"{name:18s}{cells}{fmt(ratio_all, 9, 2)}{fmt(ratio_kt, 11, 2)}")
        three = sum(1 for v in verdicts.values() if (v[statistic]["measure_all_over_surrogate"] or 0) >= 3)
        beats = sum(1 for v in verdicts.values() if (v[statistic]["best_kt_over_surrogate"] or 0) > 1)
        print(f"  by the {statistic}: >= 3x fewer than measure-all on {three} of {len(verdicts)}; "
              f"fewer than the best Kernel Tuner strategy on {beats} of {len(verdicts)}")
        boot = bootstrap_verdicts(search, strategies, statistic)
        bootstrap[statistic] = boot
        print(f"  seeds resampled {boot['draws']} times:{'all/sur 95%':>22s}{'P(>=3x)':>9s}{'P(<best KT)':>13s}")
        for name, f in boot["families"].items():
            interval = f["measure_all_over_surrogate_95"]
            span = f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "—"
            print(f"    {name:30s}{span:>16s}{f['p_three_times']:9.2f}{f['p_fewer_than_best_kt']:13.2f}")
        print(f"  P(>= 3x on {boot['most']}+ of {len(verdicts)}) = {boot['p_three_times_on_most']:.2f}; "
              f"P(fewer than the best Kernel Tuner on {boot['most']}+) = {boot['p_fewer_than_best_kt_on_most']:.2f}\n")

    print("\nZero-shot: measuring every variant in the order of the held-out model's scores, the first to reach"
          " the target comes at (learned / roofline / random expectation):")
    for name, ev in evaluation.items():
        print(f"  {name:16s} {ev['learned']['first_hit_rank']:6d} {ev['roofline']['first_hit_rank']:6d} "
              f"{ev['random']['first_hit_rank']:8.1f}")
    print("\nLearned surrogate, leave-one-problem-out (roofline heuristic and random ranking in brackets)")
    print(f"{'family':18s}{'exact':>7s}{'±1':>7s}{'Brier':>15s}{'CRPS':>15s}{'ECE':>7s}{'AURC':>7s}"
          f"{'top1%':>15s}{'top5%':>15s}{'top10%':>15s}{'top50%':>15s}{'fc/s':>8s}{'+run':>7s}")
    for name, ev in evaluation.items():
        le, ro, ra = ev["learned"], ev["roofline"], ev["random"]
        tops = "".join(f"{le[f'recovered_top_{k}pct']:6.2f}({ro[f'recovered_top_{k}pct']:.2f}/{ra[f'recovered_top_{k}pct']:.2f})"
                       .rjust(15) for k in (1, 5, 10, 50))
        print(f"{name:18s}{le['exact_accuracy']:7.2f}{le['within_one_accuracy']:7.2f}"
              f"{le['brier']:7.3f}({ro['brier']:.3f})".ljust(0) + f"{le['crps']:8.3f}({ro['crps']:.3f})"
              f"{le['ece']:7.3f}{le['aurc']:7.3f}{tops}{le['forecasts_per_s']:8.0f}"
              f"{le['forecasts_per_s_with_run_model']:7.0f}")

    output = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
        "data": "synthetic (benchmarks/search_synthetic.py; not GPU measurements)" if synthetic
        else "recorded H200 (kernellab/problems/*/records/h200.jsonl.gz)",
        "seeds": args.seeds, "target_fraction": args.target,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "datasets": {d.name: {"variants": len(d.records), "ok": len(d.rows), "best": d.best} for d in all_datasets},
        "search": search, "verdicts": verdicts, "bootstrap": bootstrap, "surrogate_lopo": evaluation,
        "seconds": time.time() - started,
    }
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"search_{cpu_name()}_{dt.date.today().isoformat()}{'_synthetic' if synthetic else ''}"
        f"{'' if args.target == TARGET_FRACTION else f'_target{round(args.target * 100)}'}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(output, indent=1, default=float))
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} in {output['seconds']:.0f} s")
    return output


if __name__ == "__main__":
    main()
