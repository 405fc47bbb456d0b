"""Search benchmark on recorded H200 data (replay), or on synthetic records until those exist.

  .venv/bin/python benchmarks/search_bench.py [--seeds 10] [--families a,b] [--quick]

Part 1 — GPU measurements needed to reach 95% of the best of each family and its vendor baseline
(cuBLAS, CuPy ...; where one is recorded and faster, no variant may reach it), over seeds:
surrogate-assisted PUCT (learned surrogate trained leave-one-problem-out, retrained online; it screens
--root-children forecast candidates at the root, and is also run without screening), PUCT that
measures every candidate (16 random variants at the root, then the neighbours of the best), random
order (its own random stream), and Kernel Tuner's strategies in simulation mode on a cache file made
from the same records, seeded and stopped by counts, never by a clock. A variant that fails to
compile costs no GPU measurement in any method (it never reaches the GPU), but every compile check
counts in the wall time reported beside the measurements. A run that misses the target counts as
the family's budget (every variant measured) in medians, means and the resampling.
Part 2 — the learned surrogate leave-one-problem-out: exact and ±1-bin accuracy, Brier, CRPS, ECE,
AURC, recovered speedup at top 1/5/10/50%, and the zero-shot rank of the first variant at the family's target (none
where no variant reaches it), against a random ranking and the roofline heuristic.

Prints tables and writes benchmarks/results/search_<cpu>_<date>.json (or --out FILE); while baselines run, what
each family gave so far is kept beside it in <name>.partial.json, removed once the whole result is written.
"""

from __future__ import annotations

import argparse
import contextlib
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
from search_engine.search_settings import TEMPLATE_SEARCH, SearchSettings  # noqa: E402
from search_engine.surrogates.ranker import APP_WEIGHT as RANKER_APP_WEIGHT  # noqa: E402
from search_engine.generators.template import KnobSpace, TemplateGenerator  # noqa: E402
from search_engine.policy import MEASURE_CHOICES, MEASURE_ORDERS, VERIFY_SLOTS, PolicySettings  # noqa: E402
from search_engine.surrogates.base import ForecastRequest  # noqa: E402
from search_engine.surrogates.learned import (DEFAULT_MOMENTS, FAMILY_WEIGHTS, LOCAL_MODELS, MOMENTS,  # noqa: E402
                                              RANKER_RELEVANCES, LearnedSurrogate)
from search_engine.surrogates.features import REFERENCE_COUNTER_SETS  # noqa: E402
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
    vendor: dict | None = None  # the vendor library's recorded speedup: {"name", "speedup", "source"}
    compile_s: float | None = None  # median seconds of one compile check of a variant, measured here
    reference_facts: dict | None = None  # the reference's compiler facts, as the app hands them to a run
    reference_profile: dict | None = None  # the reference's Nsight Compute counters, as the app hands them to a run
    reference_profile_gpu: str | None = None  # the GPU they were read on (a stand-in's, where not the recording's)
    source: str = ""  # the records file read
    vendor_in_target: bool = True  # False only for a validation family named by --ignore-vendor

    def key(self, knobs: dict) -> tuple:
        return tuple(knobs[n] for n in self.knobs)

    @property
    def best(self) -> float:
        return max(r["speedup"] for r in self.records.values() if r.get("status") == "ok")

    @property
    def target(self) -> float:
        """A fraction of the best of the family and the vendor library, whichever is faster: reaching
        95% of a family's best means little when the vendor's kernel is faster than all of it. A validation
        family named by --ignore-vendor (hgemm_mma, whose best is 41% of cuBLAS) counts its variants alone."""
        vendor = ((self.vendor or {}).get("speedup") or 0.0) if self.vendor_in_target else 0.0
        return target_fraction() * max(self.best, vendor)

    @property
    def reachable(self) -> bool:
        """Whether any recorded variant reaches the target (not when the vendor's kernel beats them all)."""
        return any(r.get("status") == "ok" and r["speedup"] >= self.target for r in self.records.values())

    @property
    def budget(self) -> int:
        """Measurements that measuring every variant costs: what a run that never reaches the target spends."""
        return sum(1 for record in self.records.values() if self.gpu_cost(record))

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
                     "reference_compiler_facts": dataset.reference_facts,
                     "reference_profile": dataset.reference_profile,
                     "speedup": record["speedup"], "problem_name": dataset.name})
    return rows


def _with_sizes(constraint: str, sizes: dict) -> str:
    for name, value in sizes.items():
        constraint = re.sub(rf"\b{re.escape(name)}\b", str(value), constraint)
    return constraint


def knob_constraints(constraints: list[str], sizes: dict, knobs: dict) -> list[str]:
    """The family's constraints with the sizes filled in, less those that name no knob: a constraint
    over sizes alone (spmv_ell's "K == 32") holds for every variant the family recorded, and Kernel
    Tuner cannot take a restriction without parameters."""
    filled = [_with_sizes(c, sizes) for c in constraints]
    return [c for c in filled if any(re.search(rf"\b{re.escape(k)}\b", c) for k in knobs)]


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
            constraints=knob_constraints(family.constraints, family.sizes, family.knobs))
        ds.rows = _rows(ds)
        out.append(ds)
    return out


def records_path(folder: Path, gpu: str, records_dir: Path | None) -> Path:
    """Where a bundled family's records are read from: `<records_dir>/<family>.jsonl.gz` when another
    recording is asked for and holds the family, else the family's own `records/<gpu>.jsonl.gz`."""
    if records_dir is not None and (records_dir / f"{folder.name}.jsonl.gz").exists():
        return records_dir / f"{folder.name}.jsonl.gz"
    return folder / "records" / f"{gpu}.jsonl.gz"


def recorded_datasets(gpu: str = "h200", records_dir: Path | None = None) -> list[Dataset]:
    """Bundled problems with recorded measurements (kernellab/problems/<name>/records/<gpu>.jsonl.gz, or
    another recording of them: `records_path`)."""
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
        path = records_path(folder, gpu, records_dir)
        if not path.exists():
            continue
        problem = variants.load(folder)
        if not problem.family:
            continue
        with gzip.open(path, "rt") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        family_records = {}
        hardware, reference_ms, reference_facts, reference_profile, vendor = {}, None, None, None, None
        profile_gpu = None
        for record in records:
            hardware = hardware or record.get("hardware") or {}
            reference_ms = reference_ms or (record.get("reference") or {}).get("median_ms")
            if record.get("variant") == "reference":
                reference_facts = record.get("compiler")
                reference_profile = record.get("profiler") or None
                profile_gpu = ((record.get("profiler_hardware") or record.get("hardware") or {}).get("name")
                               if reference_profile else None)
            if str(record.get("variant", "")).startswith("vendor:") and record.get("status") == "ok":
                vendor = {"name": record["variant"], "speedup": record["speedup"], "source": _shown(path)}
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
                     constraints=knob_constraints(problem.family.get("constraints", []), case,
                                                  problem.family["knobs"]),
                     vendor=vendor or recorded_vendor(problem.name, gpu), reference_facts=reference_facts,
                     reference_profile=reference_profile, reference_profile_gpu=profile_gpu, source=_shown(path))
        ds.rows = _rows(ds)
        out.append(ds)
    return out


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


VENDOR_RECORDS = {"h200": ROOT / "benchmarks" / "results" / "runner_h200_bundled_2026-11-29.json"}


def recorded_vendor(problem: str, gpu: str) -> dict | None:
    """The fastest vendor baseline recorded for a problem by the bundled-problems runner on this GPU,
    where the family's own records hold none (its speedup is against that run's own reference timing)."""
    path = VENDOR_RECORDS.get(gpu)
    if path is None or not path.exists():
        return None
    baselines = (json.loads(path.read_text()).get("problems", {}).get(problem) or {}).get("baselines") or {}
    vendors = [(name, b["speedup"]) for name, b in baselines.items()
               if name.startswith("vendor:") and b.get("status") == "ok" and b.get("speedup")]
    if not vendors:
        return None
    name, speedup = max(vendors, key=lambda v: v[1])
    return {"name": name, "speedup": speedup, "source": str(path.relative_to(ROOT))}


def measured_compile_seconds(dataset: Dataset, samples: int) -> float | None:
    """The median nvcc time of `samples` variants of the family (every compile check costs about this)."""
    if samples <= 0 or dataset.synthetic:
        return None
    from gpu_runner.compiler import ToolMissing, compile_cubin

    keys = sorted(dataset.records)
    chosen = random.Random(f"compile sample {dataset.name}").sample(keys, min(samples, len(keys)))
    seconds = []
    try:
        for key in chosen:
            candidate = dataset.render(dict(zip(dataset.knobs, key)))
            seconds.append(compile_cubin(candidate["source"], candidate.get("compile_options") or [],
                                         use_cache=False).report.compile_s)
    except ToolMissing:
        return None
    return statistics.median(seconds) if seconds else None


# ---- replay port ----------------------------------------------------------------------------

class ReplayPort:
    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.measurements = 0
        self.reached_at: int | None = None
        self.best = 0.0
        self.events = 0
        self.compile_checks = 0
        self.gpu_wall_s = 0.0  # the recorded wall seconds of each measurement made
        self.at_target: dict | None = None  # compile checks and GPU seconds when the target was reached
        self.measured: list[tuple] = []  # the knob tuples measured, in order

    def _record(self, candidate):
        return self.dataset.records[self.dataset.key(candidate["knobs"])]

    def compile(self, node_id, candidate):
        record = self._record(candidate)
        self.compile_checks += 1
        if record.get("status") == "failed-compile":
            return {"status": "failed-compile", "reason": record.get("reason", ""), "compiler": None}
        return {"status": "ok", "reason": "", "compiler": record.get("compiler")}

    def request_measurement(self, node_id, candidate):
        record = self._record(candidate)
        self.measurements += 1
        self.measured.append(self.dataset.key(candidate["knobs"]))
        self.gpu_wall_s += float(record.get("wall_s") or 0.0)
        if record.get("status") == "ok":
            self.best = max(self.best, record["speedup"])
            if self.reached_at is None and record["speedup"] >= self.dataset.target:
                self.reached_at = self.measurements
                self.at_target = {"compile_checks": self.compile_checks, "gpu_wall_s": self.gpu_wall_s}
        return {k: record.get(k) for k in ("status", "reason", "speedup", "reference", "candidate", "compiler")}

    def publish(self, event):
        self.events += 1


def knob_space(dataset: Dataset) -> KnobSpace:
    names = list(dataset.knobs)
    return KnobSpace(dataset.knobs, points=[dict(zip(names, key)) for key in dataset.records])


def search_settings(args, measure_all: bool, seed: int, root_children: int, gpu_budget: int) -> SearchSettings:
    """The settings of one PUCT run of the benchmark (measure_all: the baseline's, every compiled child measured)."""
    policy = PolicySettings(threshold=args.threshold, gpu_budget=gpu_budget,
                            max_gpu_per_step=args.gpu_per_step, measure_all=measure_all,
                            min_gpu_per_step=0 if measure_all else args.min_gpu_per_step,
                            min_beat_prob=args.min_beat_prob,
                            conformal_target=args.conformal if args.conformal > 0 else None,
                            # settings made before --conformal-warmup keep the fixed threshold until the conformal one
                            conformal_warmup=getattr(args, "conformal_warmup", None),
                            # settings made before --measure-order and --measure-choice (the probes of
                            # 2026-12-02/03) keep the order and choice their committed figures were measured with
                            measure_order=getattr(args, "measure_order", "verify-first"),
                            measure_choice=getattr(args, "measure_choice", "beat-probability"),
                            # and those made before --verify-slot give the verification a slot of its own
                            verify_slot=getattr(args, "verify_slot", "extra"),
                            # and those made before --step-spread let a step measure near-identical variants
                            step_spread=getattr(args, "step_spread", 0))
    return SearchSettings(policy=policy, tree=TreeOptions(c=args.c, log_rewards=True),
                          children_per_expansion=args.children, root_children=root_children, seed=seed,
                          retrain_every=args.retrain_every)


def run_puct(dataset: Dataset, seed: int, surrogate, measure_all: bool, args, root_children: int = 0,
             watch=None) -> dict:
    """One PUCT run replayed on the records until a measurement reaches the target. watch(driver, port), if
    given, is called once before the first step (a probe that traces the run wraps their methods there)."""
    port = ReplayPort(dataset)
    settings = search_settings(args, measure_all, seed, root_children, gpu_budget=len(dataset.records))
    if surrogate is not None and hasattr(surrogate, "online_weight"):
        surrogate.online_weight = args.online_weight
        # settings made before --local-prior-rows (the probes before the eighteenth session) keep the prior odds
        # n : 8 their committed figures were measured with, whatever the default
        surrogate.local_prior_rows = getattr(args, "local_prior_rows", 8.0)
        # settings made before --local-novelty (the probes before the sixteenth session) keep the novelty of 0
        # their committed figures were measured with
        surrogate.local_novelty = getattr(args, "local_novelty", 0.0)
        # and settings made before --order-prior-rows keep the recorded-data model's order uncalibrated
        surrogate.order_prior_rows = getattr(args, "order_prior_rows", None)
        # and those made before --mixture read P(beats best) and the gain from the blend's single normal
        surrogate.mixture = getattr(args, "mixture", False)
        # and those made before --local-reach weigh the run-local model alike for every candidate
        surrogate.local_reach = getattr(args, "local_reach", None)
        # and those made before --weigh-calibrated earn the run-local model's weight against the model as trained
        surrogate.weigh_calibrated = getattr(args, "weigh_calibrated", False)
        # and those made before --spread-prior-rows keep the recalibrated model's spread as it was
        surrogate.spread_prior_rows = getattr(args, "spread_prior_rows", None)
        # and those made before --calibrated-moments recalibrate the bins' moments
        surrogate.calibrated_moments = getattr(args, "calibrated_moments", "bins")
        # and those made before --pooled-spread give each candidate the recalibrated model's own spread
        surrogate.pooled_spread = getattr(args, "pooled_spread", False)
        # and those made before --local-incumbent give the run-local forest no distance to the run's best
        surrogate.local_incumbent = getattr(args, "local_incumbent", False)
        # and those made before --local-model learn from the run's rows with the forest
        surrogate.local_model = getattr(args, "local_model", "forest")
        # (--reference-profile is a trained model's feature set: it is set where the model is built)
    driver = SearchDriver(port=port, generator=TemplateGenerator(knob_space(dataset), dataset.render),
                          surrogate=surrogate, reference=dataset.reference, hardware=dataset.hardware,
                          problem=dataset.problem, settings=settings, reference_ms=dataset.reference_ms,
                          # as the app does (kernellab/services/search.py): the model was trained with them
                          reference_compiler_facts=dataset.reference_facts,
                          reference_profile=dataset.reference_profile)
    if watch is not None:
        watch(driver, port)
    steps = 0
    started = time.process_time()
    while port.reached_at is None and steps < args.max_steps:
        report = driver.step()
        steps += 1
        if report.status != "expanded":
            break
    spent = port.at_target or {"compile_checks": port.compile_checks, "gpu_wall_s": port.gpu_wall_s}
    return {"measurements": port.reached_at, "spent": port.measurements, "forecasts": driver.counters.forecasts,
            "nodes": len(driver.tree.nodes), "best": port.best, "cpu_s": time.process_time() - started,
            "order": port.measured, **spent}


def measurements_to_target(dataset: Dataset, records) -> dict:
    """Compiling and measuring records in this order (failed compiles cost no measurement): the
    measurement that first reaches the target, and the compile checks and GPU seconds spent until then."""
    spent, compile_checks, gpu_wall_s = 0, 0, 0.0
    for record in records:
        compile_checks += 1
        if not dataset.gpu_cost(record):
            continue
        spent += 1
        gpu_wall_s += float(record.get("wall_s") or 0.0)
        if record.get("status") == "ok" and record["speedup"] >= dataset.target:
            return {"measurements": spent, "spent": spent, "compile_checks": compile_checks, "gpu_wall_s": gpu_wall_s}
    return {"measurements": None, "spent": spent, "compile_checks": compile_checks, "gpu_wall_s": gpu_wall_s}


def random_order(dataset: Dataset, seed: int) -> list[dict]:
    """The family in a uniformly random order, from a random stream of its own: seeded with the bare seed,
    it was the very permutation the tree's root draws its first children from, so "random" and the
    first expansion of "measure-all PUCT" measured the same variants."""
    order = list(dataset.records.values())
    random.Random(f"random order {seed}").shuffle(order)
    return order


def run_random(dataset: Dataset, seed: int) -> dict:
    started = time.process_time()
    return measurements_to_target(dataset, random_order(dataset, seed)) | {"cpu_s": time.process_time() - started}


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


def kernel_tuner_version() -> str | None:
    try:
        import kernel_tuner
    except ImportError:
        return None
    return getattr(kernel_tuner, "__version__", None)


KT_LOOKUPS_PER_CONFIGURATION = 50
# bayes_opt is not reproducible by default: its method ("multi-ultrafast") refits its model when its last
# prediction took less time than the evaluations since (a busy and an idle machine differ), and its Latin
# hypercube start draws from fresh entropy, not from the seeded generators. "multi-fast" is the same
# portfolio of acquisition functions refitted after each round; "random" start points use the seeded one.
KT_STRATEGY_OPTIONS = {"bayes_opt": {"method": "multi-fast", "samplingmethod": "random"}}
# greedy_ils is reproducible only under one string hash seed: the order in which Kernel Tuner lists a
# configuration's neighbours follows set iteration over knob values, strings among them, and Python salts
# string hashes per process. One transpose seed took 25, 26 and 128 measurements under three hash seeds,
# and the same figures every time under one. The benchmark runs itself under this one.
PYTHON_HASH_SEED = "0"


def pin_hash_seed(argv: list[str]) -> None:
    """Run this script again under PYTHONHASHSEED=PYTHON_HASH_SEED unless it already runs under it."""
    if os.environ.get("PYTHONHASHSEED") == PYTHON_HASH_SEED:
        return
    os.execve(sys.executable, [sys.executable, *argv], {**os.environ, "PYTHONHASHSEED": PYTHON_HASH_SEED})


@contextlib.contextmanager
def kernel_tuner_lookup_cap(max_lookups: int):
    """Stop a Kernel Tuner strategy after `max_lookups` configurations asked of its simulation runner,
    repeats included. Its own max_fevals counts only new configurations, and greedy_ils or bayes_opt
    can ask the same ones again for ever (about 100,000 a second on sgemm); the 30 s clock that stopped
    them before made runs depend on the machine's load. Past the cap the runner answers nothing, which
    every strategy takes as the end of its budget."""
    from kernel_tuner.runners import simulation

    real_run = simulation.SimulationRunner.run
    asked = {"configurations": 0}

    def capped_run(runner, parameter_space, tuning_options):
        space = list(parameter_space)
        allowed = max(0, min(len(space), max_lookups - asked["configurations"]))
        asked["configurations"] += len(space)
        return real_run(runner, space[:allowed], tuning_options) + [None] * (len(space) - allowed)

    simulation.SimulationRunner.run = capped_run
    try:
        yield asked
    finally:
        simulation.SimulationRunner.run = real_run


def run_kernel_tuner(dataset: Dataset, strategy: str, seed: int, cache_path: Path, max_evaluations: int,
                     lookups_per_configuration: int = KT_LOOKUPS_PER_CONFIGURATION) -> dict:
    """One Kernel Tuner strategy in simulation mode, seeded, and stopped by counts, never by a clock:
    at most `max_evaluations` distinct configurations (as many as the space has) and
    `lookups_per_configuration` times that many configurations asked, repeats included."""
    import kernel_tuner

    names = list(dataset.knobs)
    recorded = set(dataset.records)
    def recorded_only(params):  # a def, not a lambda: Kernel Tuner parses lambdas' source text
        return tuple(params[n] for n in names) in recorded

    random.seed(seed)
    np.random.seed(seed)
    started = time.process_time()
    with warnings.catch_warnings(), kernel_tuner_lookup_cap(lookups_per_configuration * max_evaluations) as asked:
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            "family", "", (1,), [], dataset.knobs,
            # The family's constraints let Kernel Tuner build the space without walking the whole
            # knob product (valid variants that were not recorded sit in the cache as invalid).
            restrictions=list(dataset.constraints) if dataset.constraints else recorded_only,
            cache=str(cache_path), simulation_mode=True, strategy=strategy,
            strategy_options={"max_fevals": max_evaluations, **KT_STRATEGY_OPTIONS.get(strategy, {})},
            quiet=True, verbose=False)
    # Kernel Tuner's evaluations in order, each configuration once; one that is valid by the
    # constraints but was never recorded is an invalid configuration to Kernel Tuner and costs nothing.
    keys = dict.fromkeys(tuple(result[n] for n in names) for result in results if result)
    return measurements_to_target(dataset, [dataset.records[k] for k in keys if k in dataset.records]) | {
        "cpu_s": time.process_time() - started, "lookups": asked["configurations"], "order": list(keys)}


# ---- surrogate evaluation -------------------------------------------------------------------------

def _requests(rows):
    return [ForecastRequest(reference=r["reference"], candidate=r["candidate"], hardware=r["hardware"],
                            problem=r["problem"], compiler_facts=r.get("compiler_facts"),
                            reference_compiler_facts=r.get("reference_compiler_facts"),
                            reference_ms=r.get("reference_ms"), reference_profile=r.get("reference_profile"))
            for r in rows]


def forecast_metrics(forecasts, rows, scores, target: float) -> dict:
    """The forecasts' figures on the family's rows; `target` is the family's (Dataset.target: a fraction of
    the best of the family and its vendor baseline, or of its best alone under --ignore-vendor)."""
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
    # Zero-shot: measuring in the order of the scores, the measurement that first reaches the target; None
    # where no variant reaches it (a vendor's kernel faster than the whole family).
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    hits = np.asarray(speedups)[order] >= target
    out["first_hit_rank"] = int(np.argmax(hits)) + 1 if hits.any() else None
    return out


def random_ranking(rows, target: float, draws: int = 200) -> dict:
    """A random order's figures on the family's rows; `target` as forecast_metrics takes it."""
    speedups = [r["speedup"] for r in rows]
    out = {}
    for k in (0.01, 0.05, 0.10, 0.50):
        out[f"recovered_top_{int(k * 100)}pct"] = float(np.mean([
            scoring.recovered_speedup_at_top(np.zeros(len(rows)), speedups, k, seed=s) for s in range(draws)]))
    share = np.mean(np.asarray(speedups) >= target)
    # expected, without replacement; None where no variant reaches the target
    out["first_hit_rank"] = float((len(rows) + 1) / (share * len(rows) + 1)) if share > 0 else None
    uniform = [1 / 8] * 8
    truth = [DEFAULT_BINS.bin_of(s) for s in speedups]
    out["brier"] = float(np.mean([scoring.brier(uniform, t) for t in truth]))
    out["crps"] = float(np.mean([scoring.crps(uniform, t) for t in truth]))
    return out


def lopo_model(train: list[dict], args, like: list | None = None) -> LearnedSurrogate:
    """The learned surrogate of a search's settings (`args`), trained on rows of the other families; `like`, the
    searched family's requests, of which --family-weights similar reads what every variant shares (its sizes, the
    roofline, its reference's time and counters), never a variant's speedup."""
    # (settings made before --committee train the single model their committed figures came from)
    return LearnedSurrogate(seed=args.model_seed, ranker_weight=args.ranker_weight,
                            moments=getattr(args, "moments", "bins"),
                            committee=getattr(args, "committee", False),
                            # and those made before --reference-profile read no reference counters
                            reference_profile=getattr(args, "reference_profile", False),
                            # and those made before --reference-counters read all eight counters
                            reference_counters=getattr(args, "reference_counters", "all"),
                            # and those made before --family-weights weigh every training row alike
                            family_weights=getattr(args, "family_weights", "rows"),
                            similar_strength=getattr(args, "similar_strength", 1.0),
                            # and those made before --ranker-relevance label the ranker's rows by quantile
                            ranker_relevance=getattr(args, "ranker_relevance", "quantile")).fit(
        train, groups=[r["problem_name"] for r in train], like=like)


def lopo_surrogates(datasets: list[Dataset], args, only: set[str] | None = None) -> tuple[dict, dict]:
    """Per held-out dataset (those named in `only`, if given): the learned surrogate trained on the others,
    and the evaluation."""
    models, evaluation = {}, {}
    for held in datasets:
        if only is not None and held.name not in only:
            continue
        train = [r for d in datasets if d is not held for r in d.rows]
        requests = _requests(held.rows)
        started = time.perf_counter()
        model = lopo_model(train, args, like=requests)
        fit_s = time.perf_counter() - started
        models[held.name] = model
        started = time.perf_counter()
        forecasts = model.forecast_many(requests)
        rate = len(requests) / (time.perf_counter() - started)
        scores = [f.expected_log_speedup() for f in forecasts]
        learned = forecast_metrics(forecasts, held.rows, scores, held.target)
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
        roofline = forecast_metrics(roof_forecasts, held.rows, [roof.estimate_speedup(q) for q in requests],
                                    held.target)
        evaluation[held.name] = {"learned": learned, "roofline": roofline,
                                 "random": random_ranking(held.rows, held.target)}
    return models, evaluation


# ---- reporting ------------------------------------------------------------------------------------

def summarise(values: list, budget: int) -> dict:
    """Median and mean over every run: one that missed the target (None) counts as the budget, the
    measurements that measuring everything costs (a censored value, at least what it would have needed).
    Dropping it flattered a method that often misses."""
    counted = [budget if v is None else v for v in values]
    return {"median": statistics.median(counted) if counted else None,
            "mean": statistics.fmean(counted) if counted else None,
            "reached": sum(v is not None for v in values), "runs": len(values), "values": counted,
            "missed_runs": [i for i, v in enumerate(values) if v is None], "budget": budget}


def unreachable_results(dataset: Dataset, methods: list[str], seeds: int) -> dict:
    """Every method's summary where no variant reaches the target: whatever the order, a run compiles
    and measures the whole family without reaching it, and counts as the budget. Running the methods
    could only confirm it (a surrogate PUCT would take its 400 steps to do so)."""
    everything = measurements_to_target(dataset, list(dataset.records.values())) | {"cpu_s": 0.0}
    return {method: summarise_runs([everything] * seeds, dataset.budget, dataset.compile_s) | {"unreachable": True}
            for method in methods}


def summarise_runs(runs: list[dict], budget: int, compile_s: float | None) -> dict:
    """summarise() of the runs' measurements, and beside them what each run cost in wall time: compile
    checks (every candidate compiled, also those never measured), the GPU seconds of its measurements
    (recorded), the method's own CPU seconds here, and, where one compile check's time was measured, the
    estimated wall seconds of all three."""
    out = summarise([r["measurements"] for r in runs], budget)
    checks = [r["compile_checks"] for r in runs]
    gpu = [r["gpu_wall_s"] for r in runs]
    cpu = [r["cpu_s"] for r in runs]
    out.update(compile_checks_median=statistics.median(checks), gpu_wall_s_median=statistics.median(gpu),
               cpu_s_median=statistics.median(cpu), compile_checks=checks)
    if compile_s is not None:
        walls = [c * compile_s + g + p for c, g, p in zip(checks, gpu, cpu)]
        out.update(estimated_wall_s_median=statistics.median(walls), estimated_wall_s=walls)
    return out


def bootstrap_verdicts(search: dict, strategies: list[str], statistic: str, draws: int = 4000, seed: int = 0) -> dict:
    """How sure the verdicts are: the seeds of every method resampled with replacement, together for
    all families in each draw. Per family, a 95% interval of measure-all / surrogate and the share of
    draws where it is >= 3 or where the surrogate needs fewer than the best Kernel Tuner strategy; over
    families, the share of draws where each holds on most of them (more than half)."""
    rng = np.random.default_rng(seed)
    stat = np.median if statistic == "median" else np.mean

    def values(summary):
        if any(v is None for v in summary["values"]):
            raise ValueError("A run that missed the target needs a value (the budget) before resampling; "
                             "summarise() gives it one.")
        return np.array(summary["values"], dtype=float)

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


def _print_results(results: dict) -> None:
    for method, summary in results.items():
        wall = summary.get("estimated_wall_s_median")
        print(f"  {method:26s} median {fmt(summary['median'])}  mean {fmt(summary['mean'])}  "
              f"reached {summary['reached']}/{summary['runs']}  compile checks {summary['compile_checks_median']:6.0f}"
              f"  GPU {summary['gpu_wall_s_median']:6.1f} s  wall {fmt(wall, 7)} s", flush=True)


def _earlier_baselines(args) -> dict:
    """The earlier run named by --baselines-from, refused unless it was made with the same seeds, target
    and recording as this one."""
    try:
        earlier = json.loads(args.baselines_from.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--baselines-from {args.baselines_from}: cannot be read ({exc}).")
    if "verdicts" not in earlier or str(earlier.get("baselines", "")).startswith("skipped"):
        raise SystemExit(f"--baselines-from {args.baselines_from}: that run has no baselines (made with --skip-baselines?).")
    mismatched = [key for key, mine in (("seeds", args.seeds), ("target_fraction", args.target)) if earlier.get(key) != mine]
    setting = earlier.get("settings", {})
    if (setting.get("records_dir") or None) != (str(args.records_dir) if args.records_dir else None):
        mismatched.append("records_dir")
    if mismatched:
        raise SystemExit(f"--baselines-from {args.baselines_from}: made with another {', '.join(mismatched)}.")
    earlier["path"] = _shown(args.baselines_from)
    return earlier


def reused_baselines(earlier: dict, dataset: Dataset, strategies: list[str]) -> dict:
    """The earlier run's baselines of this family, refused if the family's records have changed since."""
    then = earlier.get("datasets", {}).get(dataset.name, {})
    now = {"variants": len(dataset.records), "best": dataset.best, "target": dataset.target, "budget": dataset.budget}
    changed = [k for k, v in now.items() if then.get(k) is None or abs(float(then[k]) - float(v)) > 1e-9 * max(1.0, abs(v))]
    if changed:
        raise SystemExit(f"--baselines-from: {dataset.name}'s records have changed since that run ({', '.join(changed)}).")
    methods = ["puct_measure_all", "random"] + [f"kt_{s}" for s in strategies]
    missing = [m for m in methods if m not in earlier["search"].get(dataset.name, {})]
    if missing:
        raise SystemExit(f"--baselines-from: that run has no {', '.join(missing)} for {dataset.name}.")
    return {m: dict(earlier["search"][dataset.name][m], reused_from=earlier["path"])
            for m in methods}


def report_verdicts(search: dict, args, strategies: list[str]) -> tuple[dict, dict]:
    """Prints each family's medians and means against the baselines, the verdicts and their resampling;
    returns (verdicts, bootstrap)."""
    print(f"\nGPU measurements to reach {args.target:.0%} of the best of the family and its vendor baseline, "
          f"median then mean over seeds (a run that missed counts as the family's budget; sur: the surrogate "
          f"PUCT screening {args.root_children} at the root, unscr: the same without screening)")
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
                "best_kt_strategy": min(kts, key=kts.get) if kts else None,
                # What the measurements leave out: each method's median wall seconds, compile checks included.
                "estimated_wall_s_median": {m: results[m].get("estimated_wall_s_median") for m in methods}}
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
    return verdicts, bootstrap


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


def optional_float(text: str) -> float | None:
    """A number, or None for 'none' (a setting switched off)."""
    return None if text.strip().lower() == "none" else float(text)


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options (a probe that replays its runs takes its defaults from here)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    app = LearnedSurrogate()  # the learned surrogate's settings as the app has them
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--families", default="", help="comma-separated families to search (all are trained on)")
    parser.add_argument("--exclude", default="",
                        help="comma-separated families left out entirely: neither searched nor trained on "
                             "(hgemm, recorded after the 8-family run of 2026-12-01, to repeat that run)")
    parser.add_argument("--records-dir", type=Path, default=None,
                        help="replay another recording: <dir>/<family>.jsonl.gz for each family it holds (the "
                             "bundled records for the others), e.g. benchmarks/results/recordings/h200_2026-12-03")
    parser.add_argument("--ignore-vendor", default="",
                        help="comma-separated families whose target is a fraction of their best variant alone, not of "
                             "the vendor's kernel too: for validation families only (hgemm_mma), never the test's")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic records even if real ones exist")
    parser.add_argument("--kt", default=",".join(KT_STRATEGIES))
    # The search's own settings default to search_engine.search_settings.TEMPLATE_SEARCH, where a run of a problem
    # with knobs starts in the app too.
    parser.add_argument("--threshold", type=float, default=TEMPLATE_SEARCH.threshold)
    parser.add_argument("--gpu-per-step", type=int, default=TEMPLATE_SEARCH.max_gpu_per_step)
    parser.add_argument("--children", type=int, default=TEMPLATE_SEARCH.children_per_expansion,
                        help="children per expansion (template neighbours are cheap to forecast)")
    parser.add_argument("--root-children", type=int, default=TEMPLATE_SEARCH.root_children,
                        help="children the surrogate PUCT screens at the root (0: --children); measure-all uses --children")
    parser.add_argument("--min-gpu-per-step", type=int, default=TEMPLATE_SEARCH.min_gpu_per_step,
                        help="measurements a surrogate step makes when no candidate clears --min-beat-prob")
    parser.add_argument("--c", type=float, default=TEMPLATE_SEARCH.c)
    parser.add_argument("--retrain-every", type=int, default=TEMPLATE_SEARCH.retrain_every)
    parser.add_argument("--model-seed", type=int, default=0,
                        help="the learned surrogate's random seed (its calibration folds and the forest it fits to a run's own measurements); the search seeds stay 0..seeds-1")
    parser.add_argument("--ranker-weight", type=float, default=RANKER_APP_WEIGHT,
                        help="weight of the lambdarank prior in the recorded-data model's bins (surrogates.ranker; "
                             "default: the app's, %(default)s; 0: the classifier alone, as before 2026-12-03)")
    parser.add_argument("--measure-order", choices=MEASURE_ORDERS, default=PolicySettings.measure_order,
                        help="the order of a step's measurements (search_engine.policy; default: the app's, %(default)s)")
    parser.add_argument("--measure-choice", choices=MEASURE_CHOICES, default=PolicySettings.measure_choice,
                        help="which candidates take a step's GPU slots (search_engine.policy; default: the app's, "
                             "%(default)s)")
    parser.add_argument("--verify-slot", choices=VERIFY_SLOTS, default=PolicySettings.verify_slot,
                        help="whether the verification of a forecast-only best is a measurement on top of a step's or "
                             "takes one of its slots (search_engine.policy; default: the app's, %(default)s)")
    parser.add_argument("--step-spread", type=int, default=PolicySettings.step_spread,
                        help="the knob values a step's measurements chosen by their forecasts must differ in, pairwise "
                             "(search_engine.policy; default: the app's, %(default)s; 0: off)")
    parser.add_argument("--moments", choices=MOMENTS, default=DEFAULT_MOMENTS,
                        help="where the learned surrogate's forecast mean and spread come from (surrogates.learned; "
                             "default: the app's, %(default)s)")
    parser.add_argument("--local-novelty", type=float, default=app.local_novelty,
                        help="how much a candidate's knob values unseen in the run widen its run-local forecast "
                             "(surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--order-prior-rows", type=optional_float, default=app.order_prior_rows,
                        help="recalibrate the recorded-data model's order on the run's measurements, its slope "
                             "shrunk towards 1 by this many pseudo rows (surrogates.learned; default: the app's, "
                             "%(default)s; none: off, as before protocol 15)")
    parser.add_argument("--mixture", action=argparse.BooleanOptionalAction, default=app.mixture,
                        help="read P(beats best) and the expected gain from the two models' normals, not from one "
                             "normal of the blend's moments (surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--local-reach", type=float, default=app.local_reach,
                        help="the run-local model's weight falls for candidates whose recorded-data mean lies outside "
                             "the run's rows' range, over this many of their sds (surrogates.learned; default: the "
                             "app's, %(default)s, None: the same weight everywhere)")
    parser.add_argument("--weigh-calibrated", action=argparse.BooleanOptionalAction, default=app.weigh_calibrated,
                        help="earn the run-local model's weight against the recorded-data model as recalibrated on the "
                             "run's other rows, not as trained (surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--spread-prior-rows", type=optional_float, default=app.spread_prior_rows,
                        help="rescale the recalibrated recorded-data model's spread by its error on the run's rows, "
                             "shrunk towards 1 by this many pseudo rows (surrogates.learned; default: the app's, "
                             "%(default)s; none: off)")
    parser.add_argument("--calibrated-moments", choices=MOMENTS, default=app.calibrated_moments,
                        help="the recorded-data model's moments that the recalibration reads from a run's third row on: "
                             "the published bins' or the relative bins' moved by the level, which the top bin does "
                             "not cut off (surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--pooled-spread", action=argparse.BooleanOptionalAction, default=app.pooled_spread,
                        help="one spread, its error on the run's rows, for every candidate of the recalibrated "
                             "recorded-data model (surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--local-incumbent", action=argparse.BooleanOptionalAction, default=app.local_incumbent,
                        help="the run-local forest also reads each variant's distance to the run's best measured "
                             "variant (surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--local-model", choices=LOCAL_MODELS, default=app.local_model,
                        help="the run-local model: a random forest over the variants' features and knob values, or a "
                             "Gaussian process over the knob values on the recalibrated recorded-data model's errors "
                             "(surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--reference-profile", action=argparse.BooleanOptionalAction, default=app.reference_profile,
                        help="the recorded-data model also reads the reference's Nsight Compute counters (L1/L2 hit "
                             "rates, DRAM and SM throughput, occupancy; surrogates.learned; default: the app's, "
                             "%(default)s)")
    parser.add_argument("--reference-counters", choices=list(REFERENCE_COUNTER_SETS), default=app.reference_counters,
                        help="with --reference-profile: all eight of the reference's counters, or the four portable "
                             "ones that read alike on an H100 and an H200 (L1 hit rate, occupancy, sectors per load, "
                             "DRAM bytes over the roofline's; surrogates.features; default: the app's, %(default)s)")
    parser.add_argument("--family-weights", choices=FAMILY_WEIGHTS, default=app.family_weights,
                        help="rows: every training row weighs the same; equal: every recorded family weighs the same; "
                             "sqrt: a family's total grows with the square root of its rows; similar: the families "
                             "whose reference is like the searched one's weigh more (surrogates.learned; default: the "
                             "app's, %(default)s)")
    parser.add_argument("--similar-strength", type=float, default=app.similar_strength,
                        help="with --family-weights similar: how much more the families like the searched one weigh "
                             "(surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--ranker-relevance", choices=RANKER_RELEVANCES, default=app.ranker_relevance,
                        help="how the ranking prior labels a recorded variant: its speedup's quantile in its family, "
                             "or how far it runs from the family's fastest in steps of 5%% (surrogates.ranker; "
                             "default: the app's, %(default)s)")
    parser.add_argument("--committee", action=argparse.BooleanOptionalAction, default=app.committee,
                        help="the recorded-data model averages its calibration folds' models with the full one "
                             "(surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--min-beat-prob", type=float, default=TEMPLATE_SEARCH.min_beat_prob)
    parser.add_argument("--conformal", type=float, default=TEMPLATE_SEARCH.conformal_target,
                        help="target error rate of accepted forecasts (0: the fixed threshold only)")
    parser.add_argument("--conformal-warmup", type=optional_float, default=TEMPLATE_SEARCH.conformal_warmup,
                        help="the threshold before the run has measured enough forecasts for the conformal one "
                             "(search_engine.policy; default: the app's, %(default)s, the fixed --threshold; 1: trust "
                             "no forecast until then)")
    parser.add_argument("--online-weight", type=float, default=10.0)
    parser.add_argument("--local-prior-rows", type=float, default=app.local_prior_rows,
                        help="the prior odds n : this of the run-local model against the recorded-data model "
                             "(surrogates.learned; default: the app's, %(default)s)")
    parser.add_argument("--skip-baselines", action="store_true", help="only the surrogate-assisted PUCT")
    parser.add_argument("--baselines-from", type=Path, default=None,
                        help="an earlier run's JSON on the same records, seeds and target: its measure-all, random and "
                             "Kernel Tuner results are taken instead of being run again (they do not depend on the "
                             "surrogate); the surrogate PUCT is run afresh")
    parser.add_argument("--lopo-searched-only", action="store_true",
                        help="train and evaluate the held-out models of the searched families only (every family is "
                             "still trained on); the zero-shot table then covers those alone")
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--target", type=float, default=TARGET_FRACTION, help="fraction of the best speedup to reach")
    parser.add_argument("--compile-samples", type=int, default=3,
                        help="variants of each family compiled with nvcc to time one compile check (0: none)")
    parser.add_argument("--out", default="")
    return parser


def named_families(text: str, datasets: list[Dataset], flag: str) -> set[str]:
    """The comma-separated family names a flag gives, refused with the names that no dataset has."""
    names = {name for name in text.split(",") if name}
    unknown = names - {d.name for d in datasets}
    if unknown:
        raise SystemExit(f"{flag} names no recorded family: {', '.join(sorted(unknown))}.")
    return names


def kt_strategies(text: str, needed: bool = True) -> list[str]:
    """The comma-separated Kernel Tuner strategies --kt gives, refused with the names Kernel Tuner does not have
    (Kernel Tuner itself refuses them only when the first one runs, after the training); `needed`: the baselines
    are run here, so Kernel Tuner must be installed."""
    strategies = [s for s in text.split(",") if s]
    if not strategies:
        return strategies
    try:
        from kernel_tuner.interface import strategy_map
    except ImportError:
        if needed:
            raise SystemExit("--kt names Kernel Tuner strategies, but Kernel Tuner is not installed (it is in the "
                             "dev extra); give --kt '' to run the other baselines without it.") from None
        return strategies
    unknown = [s for s in strategies if s not in strategy_map]
    if unknown:
        raise SystemExit(f"--kt names no Kernel Tuner strategy: {', '.join(unknown)} (Kernel Tuner "
                         f"{kernel_tuner_version()} has {', '.join(sorted(strategy_map))}).")
    return strategies


def main(argv=None) -> dict:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, not {args.seeds}")
    strategies = kt_strategies(args.kt, needed=not args.skip_baselines and args.baselines_from is None)
    _TARGET["fraction"] = args.target

    earlier = _earlier_baselines(args) if args.baselines_from is not None else None
    if args.records_dir is not None and not args.records_dir.is_dir():
        raise SystemExit(f"--records-dir {args.records_dir}: no such folder.")
    datasets = [] if args.synthetic else recorded_datasets(records_dir=args.records_dir)
    synthetic = not datasets
    if synthetic:
        print("NOTE: no recorded H200 datasets (kernellab/problems/*/records/h200.jsonl.gz) were found;"
              " these figures come from SYNTHETIC records (benchmarks/search_synthetic.py), not from a GPU.\n")
        datasets = synthetic_datasets()
    excluded = named_families(args.exclude, datasets, "--exclude")
    datasets = [d for d in datasets if d.name not in excluded]
    no_vendor = named_families(args.ignore_vendor, datasets, "--ignore-vendor")
    for dataset in datasets:
        dataset.vendor_in_target = dataset.name not in no_vendor
    if args.families:
        wanted = named_families(args.families, datasets, "--families")  # a typo would search nothing and say so late
        if not wanted:
            raise SystemExit(f"--families {args.families!r} names no family.")
    else:
        wanted = {d.name for d in datasets}
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        f"search_{cpu_name()}_{dt.date.today().isoformat()}{'_synthetic' if synthetic else ''}"
        f"{'' if args.target == TARGET_FRACTION else f'_target{round(args.target * 100)}'}.json")
    if out.is_dir():
        raise SystemExit(f"--out {args.out} is a folder; give a file name (.json).")
    # What each family's baselines took so far, beside the output (not in benchmarks/results/ whatever --out says),
    # so that a run stopped part way keeps them; none beside a device such as /dev/null.
    partial = out.with_name(f"{out.stem}.partial.json") if not out.exists() or out.is_file() else None
    all_datasets = datasets
    started = time.time()

    print("Training the learned surrogate leave-one-problem-out ...", flush=True)
    models, evaluation = lopo_surrogates(all_datasets, args, only=wanted if args.lopo_searched_only else None)

    search = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in [d for d in all_datasets if d.name in wanted]:
            dataset.compile_s = measured_compile_seconds(dataset, args.compile_samples)
            vendor = f", vendor {dataset.vendor['name']} {dataset.vendor['speedup']:.3g}x" if dataset.vendor else ""
            print(f"\n{dataset.name}: {len(dataset.records)} variants, best {dataset.best:.3g}x{vendor}, "
                  f"target {dataset.target:.3g}x, budget {dataset.budget} measurements, "
                  f"compile check {fmt(dataset.compile_s, 0, 2).strip()} s", flush=True)
            results = {}
            # The surrogate PUCT screens root_children candidates at the root (forecasts are cheap),
            # and, for comparison, the same search without screening.
            configs = [("puct_surrogate", args.root_children)]
            if args.root_children and not args.skip_baselines:
                configs.append(("puct_surrogate_unscreened", 0))
            if not dataset.reachable:
                methods = [m for m, _ in configs] + ([] if args.skip_baselines else
                                                     ["puct_measure_all", "random"] + [f"kt_{s}" for s in strategies])
                search[dataset.name] = unreachable_results(dataset, methods, args.seeds)
                print(f"  no recorded variant reaches the target: every method compiles and measures the whole "
                      f"family, {dataset.budget} measurements, in each of {args.seeds} runs", flush=True)
                continue
            for method, root_children in configs:
                t0 = time.time()
                runs = [run_puct(dataset, s, copy.deepcopy(models[dataset.name]), False, args, root_children)
                        for s in range(args.seeds)]
                results[method] = summarise_runs(runs, dataset.budget, dataset.compile_s) | {
                    "forecasts_mean": statistics.fmean(r["forecasts"] for r in runs), "seconds": time.time() - t0,
                    "root_children": root_children}
            if args.skip_baselines:
                search[dataset.name] = results
                print(f"  puct_surrogate median {fmt(results['puct_surrogate']['median'])} "
                      f"values {results['puct_surrogate']['values']}", flush=True)
                continue
            if earlier is not None:
                results |= reused_baselines(earlier, dataset, strategies)
                search[dataset.name] = results
                _print_results(results)
                continue
            t0 = time.time()
            runs = [run_puct(dataset, s, None, True, args) for s in range(args.seeds)]
            results["puct_measure_all"] = summarise_runs(runs, dataset.budget, dataset.compile_s) | {
                "seconds": time.time() - t0}
            results["random"] = summarise_runs([run_random(dataset, s) for s in range(args.seeds)], dataset.budget,
                                               dataset.compile_s)
            cache = kt_cache(dataset, Path(tmp))
            configurations = len(json.loads(cache.read_text())["cache"])
            for strategy in strategies:
                t0 = time.time()
                runs = [run_kernel_tuner(dataset, strategy, s, cache, configurations) for s in range(args.seeds)]
                results[f"kt_{strategy}"] = summarise_runs(runs, dataset.budget, dataset.compile_s) | {
                    "seconds": time.time() - t0, "max_evaluations": configurations}
            search[dataset.name] = results
            if partial is not None:
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_text(json.dumps({"search": search, "surrogate_lopo": evaluation}, indent=1,
                                              default=float))
            _print_results(results)

    if args.skip_baselines:
        verdicts, bootstrap = {}, {}  # nothing to compare with: the JSON keeps the runs alone
    else:
        verdicts, bootstrap = report_verdicts(search, args, strategies)

    print("\nZero-shot: measuring every variant in the order of the held-out model's scores, the first to reach"
          " the target comes at (learned / roofline / random expectation):")
    for name, ev in evaluation.items():
        ranks = [ev[k]["first_hit_rank"] for k in ("learned", "roofline", "random")]
        if None in ranks:  # (all three: the same rows and target)
            print(f"  {name:16s} {'—':>6s} {'—':>6s} {'—':>8s}  no recorded variant reaches the target")
        else:
            print(f"  {name:16s} {ranks[0]:6d} {ranks[1]:6d} {ranks[2]:8.1f}")
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
        else "recorded H200 (kernellab/problems/*/records/h200.jsonl.gz)" if args.records_dir is None
        else f"recorded H200: {_shown(args.records_dir)}/<family>.jsonl.gz where it holds the family, else the "
             "bundled records (each dataset's `records` says which)",
        "seeds": args.seeds, "target_fraction": args.target,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("out",)},
        "kernel_tuner": {"version": kernel_tuner_version(), "strategy_options": KT_STRATEGY_OPTIONS,
                         "python_hash_seed": os.environ.get("PYTHONHASHSEED"),
                         "lookups_per_configuration": KT_LOOKUPS_PER_CONFIGURATION,
                         "stop": "distinct configurations (the space's size) and lookups, never a clock"},
        "censoring": "a run that missed the target counts as the family's budget (variants that cost a measurement)",
        "datasets": {d.name: {"records": d.source, "variants": len(d.records), "ok": len(d.rows), "best": d.best,
                              "vendor": d.vendor, "vendor_in_target": d.vendor_in_target,
                              "target": d.target, "budget": d.budget, "compile_s": d.compile_s,
                              "reference_profiled_on": d.reference_profile_gpu,
                              "variants_at_target": sum(1 for r in d.rows if r["speedup"] >= d.target)}
                     for d in all_datasets},
        "baselines": "skipped (--skip-baselines): the surrogate's runs alone, no verdicts" if args.skip_baselines
        else f"reused from {_shown(args.baselines_from)}" if args.baselines_from is not None else "computed in this run",
        "search": search, "verdicts": verdicts, "bootstrap": bootstrap, "surrogate_lopo": evaluation,
        "seconds": time.time() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(output, indent=1, default=float))
    if partial is not None:
        partial.unlink(missing_ok=True)  # the whole result is written: what it kept for a stopped run is in it
    print(f"\nwrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out} in {output['seconds']:.0f} s")
    return output


if __name__ == "__main__":
    pin_hash_seed([os.path.abspath(__file__), *sys.argv[1:]])
    main()
