"""Issue 21's goal on the H200: a new user's own naive kernels, searched for real, against their roofline.

  python3 benchmarks/own_kernels_h200.py [--budget 150] [--deadline-s 240] [--kernels gelu,column_sum]
                                         [--backend cupy|fake] [--no-overlap] [--out PATH]
  python3 benchmarks/own_kernels_h200.py --floors-only [--best-from RESULT.json] [--kernels ...]

For each kernel in tests/gpu_runner/own_kernels/ it runs the search the web app runs (the same driver,
the recipes' cures with the template of the kernel's automatic knobs, the roofline surrogate, the GPU
runner's backend, nvcc through the one compile path) with a budget of GPU measurements, without
Django: a port of its own compiles through gpu_runner.Runner.check_many and measures through
Runner.measure, as benchmarks/search_bench.py drives the driver without the database.

Roofline bound of a memory-bound kernel = the bytes its [roofline] says it must move / the copy
bandwidth measured in the same run (a 1 GiB device-to-device copy, CUDA events, median of 20).
`reference_fraction_of_roofline` and `best_fraction_of_roofline` are that bound over the measured
median times (the runner's timing, L2 flushed between runs). Compile time is every compile check's
wall time in the search (a measurement's own compile is a cache hit); its share is of the search's
wall time. With --overlap (the default, as a run from the web form) a step's SASS counts and measurements
run on a thread of their own while the driver expands the next step and compile-checks its children
(settings.prefetch_while_measuring); `compile_share_of_wall` is then the compile time the search waited for
(`compile_exposed_s`: the batches' wall time during which no measuring ran), and
`compile_batches_share_of_wall` all of the batches' wall time. --no-overlap: one after the other, and the two
shares are the same. The SASS counts of a step's measured children (cuobjdump, for the experts' notes) are taken
at once before their measurements (`prepare_measurements`) and reported apart (`sass_counts_s`,
`sass_share_of_wall`); `measurement_phase_median_s` says where a measurement's own time goes. `app_vs_record_max_rel_diff` re-measures a sample of the bundled transpose family's
recorded variants through Runner.measure (the app's verification path, nvcc cubins) and compares
their speedups with the records.

Beside the roofline, each kernel gets its protocol floor (`protocol_floor`, `protocol_ceiling_fraction_of_roofline`,
`best_fraction_of_protocol_floor`): the fastest of a few plain float4 kernels that read the kernel's inputs once
and write its outputs once, timed after the runner's L2 flush. That flush writes, so every timed run starts
with L2 full of dirty lines; on a kernel that moves tens of MiB the write-back is much of its time, and the
floor estimates how much of the roofline a kernel of that size can show under the protocol (an estimate:
a searched kernel can beat a plain one by a few percent, as the gelu's did by 4.9%).
`--floors-only [--best-from RESULT.json]` measures only the floors (a few seconds; own_kernels_floors_*.json).

`--backend fake` is a CPU dry run: real compile checks with nvcc, and a "measurement" that is a
deterministic function of the source hash (no GPU); its figures say nothing about speed, only that
the driver, the port, the deadline and the result file work. It writes *_cpu-dryrun_* files.

The result file has `kernels` (name, reference_fraction_of_roofline, best_fraction_of_roofline,
measurements, compile_share_of_wall, winning_recipe, ...) and `app_vs_record_max_rel_diff`; it is
rewritten after each kernel, so a deadline leaves what was done.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_runner import Candidate, Runner, load_problem, reference_candidate  # noqa: E402
from gpu_runner.auto_knobs import family_from_knobs, propose_knobs  # noqa: E402
from gpu_runner.family import render_variant, valid_variants  # noqa: E402
from gpu_runner.result import MeasurementResult, TimingStats  # noqa: E402
from gpu_runner.settings import MeasureSettings  # noqa: E402
from gpu_runner.spec import SpecError, parse_problem  # noqa: E402
from search_engine.driver import SearchDriver  # noqa: E402
from search_engine.generators.combined import CombinedGenerator  # noqa: E402
from search_engine.generators.recipes import RECIPE_NAME_PREFIX, RecipeGenerator  # noqa: E402
from search_engine.generators.template import KnobSpace, TemplateGenerator  # noqa: E402
from search_engine.policy import PolicySettings  # noqa: E402
from search_engine.search_settings import SearchSettings  # noqa: E402
from search_engine.surrogates.roofline import RooflineSurrogate  # noqa: E402
from search_engine.tree import TreeOptions  # noqa: E402

OWN = ROOT / "tests" / "gpu_runner" / "own_kernels"
KERNELS = ("gelu", "row_rmsnorm", "column_sum", "stencil3x3", "row_softmax")
TRANSPOSE = ROOT / "kernellab" / "problems" / "transpose"
DATE = dt.date.today().isoformat()
GOAL = 0.70
# Fewer validation sets and repetitions than a verification, the same protocol (the recorder's).
SETTINGS = MeasureSettings(validation_sets=2, warmup=2, min_reps=5, max_reps=40, target_timing_ms=40.0,
                           escape_runs=3, reference_cache_s=60.0, kernel_timeout_s=5.0)


# ---- the port: compile checks and measurements through gpu_runner, timed ----------------------
class RunnerPort:
    """`asynchronous`: a step's SASS counts and measurements run on a thread of their own (started by
    `start_measuring` once the step has asked for them all), as the app's GPU worker runs beside its search
    worker, so the driver can compile the next step meanwhile (settings.prefetch_while_measuring); the
    results reach the driver through `deliver`. When each compile batch and each step's measuring ran is kept,
    so `exposed_compile_s` can say how much compile time no measuring ran beside."""

    def __init__(self, runner, spec, measure, *, asynchronous: bool = False):
        self.runner, self.spec, self.measure = runner, spec, measure
        self.asynchronous = asynchronous
        self.compile_s = 0.0
        self.sass_s = 0.0
        self.measure_s = 0.0
        self.compile_checks = 0
        self.compile_batches: list[dict] = []
        self.measured: list[dict] = []
        self.measuring: list[tuple[float, float]] = []   # when the measuring thread worked (perf_counter)
        self._compiling: list[tuple[float, float]] = []   # when each compile batch ran
        self._to_prepare: list = []
        self._to_measure: list[tuple[int, dict]] = []
        self._results: list[tuple[int, dict]] = []
        self._thread: threading.Thread | None = None

    def compile(self, node_id, candidate):
        return self.compile_many([(node_id, candidate)])[0]

    def compile_many(self, items):
        started = time.perf_counter()
        overlapped = self._thread is not None
        answers: list[dict | None] = [None] * len(items)
        parsed, where = [], []
        for i, (_, candidate) in enumerate(items):
            try:
                parsed.append(Candidate.from_dict(candidate, self.spec))
                where.append(i)
            except (SpecError, KeyError, TypeError, ValueError) as exc:
                answers[i] = {"status": "failed-compile", "reason": f"The candidate does not fit the problem: {exc}",
                              "compiler": None}
        # no SASS counts, as the app's search port asks (forecasts read none; cuobjdump is ~0.45 s a cubin)
        reports = self.runner.check_many(self.spec, parsed, sass=False)
        for i, report in zip(where, reports):
            facts = asdict(report.facts) if report.facts else None
            answers[i] = {"status": "ok" if report.ok else "failed-compile",
                          "reason": "" if report.ok else report.summary(), "compiler": facts}
        self.compile_checks += len(items)
        wall = time.perf_counter() - started
        self.compile_s += wall
        # each check's own compile time (0 where the cache answered) beside the batch's wall time
        each = sorted(r.compile_s for r in reports)
        slowest = max(range(len(reports)), key=lambda j: reports[j].compile_s, default=None)
        self._compiling.append((started, started + wall))
        self.compile_batches.append({"n": len(items), "wall_s": round(wall, 4), "beside_measuring": overlapped,
                                     "slowest_s": round(each[-1], 4) if each else 0.0,
                                     "slowest_name": parsed[slowest].name if slowest is not None else None,
                                     "median_s": round(each[len(each) // 2], 4) if each else 0.0,
                                     "engines": sorted({(r.compiler or "").split(" ")[0] for r in reports})})
        return answers

    def prepare_measurements(self, items):
        """The step's measured children get their SASS counts at once, one cuobjdump per core, into the
        compile cache their measurements then read (each would otherwise wait ~0.5 s for its own)."""
        if self.asynchronous:
            self._to_prepare = list(items)
            return
        self._prepare(items)

    def _prepare(self, items):
        started = time.perf_counter()
        parsed = []
        for _, candidate in items:
            try:
                parsed.append(Candidate.from_dict(candidate, self.spec))
            except (SpecError, KeyError, TypeError, ValueError):
                continue
        self.runner.check_many(self.spec, parsed, sass=True)
        self.sass_s += time.perf_counter() - started

    def request_measurement(self, node_id, candidate):
        if self.asynchronous:
            self._to_measure.append((node_id, candidate))
            return None
        return self._measure(node_id, candidate)

    def start_measuring(self) -> bool:
        """The step's SASS counts and measurements, on the measuring thread; False when none were asked for."""
        if not self._to_measure:
            return False
        prepare, batch = self._to_prepare, self._to_measure
        self._to_prepare, self._to_measure = [], []

        def work():
            began = time.perf_counter()
            try:
                if prepare:
                    try:
                        self._prepare(prepare)
                    except Exception:  # noqa: BLE001 - SASS counts are notes; the measurements take their own
                        pass
                for node_id, candidate in batch:
                    try:
                        result = self._measure(node_id, candidate)
                    except Exception as exc:  # noqa: BLE001 - the driver gets a result for every request
                        result = {"status": "failed-runtime", "speedup": None,
                                  "reason": f"the measurement raised {type(exc).__name__}: {exc}"}
                    self._results.append((node_id, result))
            finally:
                self.measuring.append((began, time.perf_counter()))

        self._thread = threading.Thread(target=work, name="measuring", daemon=True)
        self._thread.start()
        return True

    def deliver(self, driver) -> int:
        """Wait for the measuring thread, then hand its results to the driver; how many."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        results, self._results = self._results, []
        for node_id, result in results:
            driver.on_measurement(node_id, result)
        return len(results)

    def exposed_compile_s(self) -> float:
        """The compile batches' wall time during which no measuring ran (what the search waited for them)."""
        total = 0.0
        for started, ended in self._compiling:
            overlap = sum(max(0.0, min(ended, end) - max(started, begin)) for begin, end in self.measuring)
            total += max(0.0, ended - started - overlap)
        return total

    def _measure(self, node_id, candidate):
        started = time.perf_counter()
        result = self.measure(self.spec, Candidate.from_dict(candidate, self.spec))
        self.measure_s += time.perf_counter() - started
        row = {"node": node_id, "name": candidate.get("name") or "", "status": result.status,
               "reason": result.reason[:300], "speedup": result.speedup,
               "candidate_ms": result.candidate.median_ms if result.candidate else None,
               "reference_ms": result.reference.median_ms if result.reference else None,
               "compiled_with": (result.compiler.compiled_with if result.compiler else None),
               "wall_s": round(time.perf_counter() - started, 4), "phase_s": dict(result.phase_s)}
        self.measured.append(row)
        return result.to_dict()

    def publish(self, event):
        pass


# ---- measuring: the real runner, or the CPU dry run ----------------------------------------------
def fake_measure(spec, candidate) -> MeasurementResult:
    """Not a measurement: a deterministic stand-in for the dry run (the source hash picks a time)."""
    reference_ms = 1.0
    digest = int(hashlib.sha256(candidate.source.encode()).hexdigest()[:8], 16)
    ms = reference_ms * (0.3 + 1.2 * (digest % 1000) / 1000)
    return MeasurementResult(status="ok", speedup=reference_ms / ms, backend="fake",
                             reference=TimingStats(reference_ms, 0.0, 5, 0.0),
                             candidate=TimingStats(ms, 0.0, 5, 0.0), candidate_name=candidate.name)


def copy_bandwidth_gbs(repeats: int = 20, nbytes: int = 1 << 30) -> dict:
    """Device-to-device copy of `nbytes` (read + write counted), CUDA events, median of `repeats`."""
    import cupy

    src = cupy.ones(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    for _ in range(3):
        dst[...] = src
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        dst[...] = src
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    median_ms = statistics.median(times)
    del src, dst
    cupy.get_default_memory_pool().free_all_blocks()
    return {"bytes": 2 * nbytes, "median_ms": median_ms, "gbs": 2 * nbytes / (median_ms * 1e-3) / 1e9,
            "what": "cupy dst[...] = src, 1 GiB float32, 3 warm-ups, median of 20 CUDA-event timings"}


# ---- the protocol's own ceiling ---------------------------------------------------------------------
# The runner empties L2 by writing a buffer larger than it before every timed run (so does triton's
# do_bench): a timed run starts with L2 full of dirty lines, which go back to memory while it runs. On a
# 1 GiB copy that costs little; on a kernel that moves tens of MiB it is much of the time (a read of
# 64 MiB: 25.5 us after that flush, 19.4 us after a clean one; benchmarks/probes/h200_2026-12-02). The
# protocol floor is the fastest of a few plain float4 kernels that read the kernel's inputs once and
# write its outputs once, timed after the same flush. It is an estimate, not a bound: on 2026-12-02 the
# searched gelu ran 4.9% under it (the plain kernel is a grid-stride copy of one float4 per iteration),
# the searched column sum 1.7% over it.
FLOOR_SOURCE = r"""
extern "C" __global__ void kl_floor(const float4* __restrict__ in, float4* __restrict__ out, long long n_in,
                                    long long n_out, float* __restrict__ partial) {
    float kept = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_in || i < n_out; i += stride) {
        const float4 v = i < n_in ? __ldg(in + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n_out) out[i] = v;
        else kept += (v.x + v.y) + (v.z + v.w);
    }
    for (int offset = 16; offset > 0; offset >>= 1) kept += __shfl_xor_sync(0xffffffffu, kept, offset);
    if ((threadIdx.x & 31) == 0) partial[(blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5] = kept;
}
"""
FLOOR_GRIDS_PER_SM = (4, 8, 16)
FLOOR_BLOCK = 256


def roofline_of(spec, bandwidth_gbs: float) -> tuple[float, float]:
    """(the [roofline] bytes of the default size, the time they take at `bandwidth_gbs`, in ms)."""
    nbytes = float(spec.roofline.bytes.evaluate(dict(spec.default_case.sizes)))
    return nbytes, nbytes / (bandwidth_gbs * 1e9) * 1e3


def moved_bytes(spec) -> tuple[int, int]:
    """(bytes read, bytes written) of the default size: every input read once, every output written once."""
    env = dict(spec.default_case.sizes)
    read = sum(a.nbytes(env) for a in spec.args_with_role("input", "inout"))
    written = sum(a.nbytes(env) for a in spec.args_with_role("output", "inout"))
    return read, written


def protocol_floor(read_bytes: int, write_bytes: int, *, flush_bytes: int = 256 << 20, repeats: int = 30) -> dict:
    """The floor kernel's median time after a write flush (the runner's), best over FLOOR_GRIDS_PER_SM."""
    import cupy

    n_in, n_out = -(-read_bytes // 16), -(-write_bytes // 16)
    src = cupy.random.standard_normal(4 * max(n_in, 1), dtype=cupy.float32)
    dst = cupy.empty(4 * max(n_out, 1), dtype=cupy.float32)
    flush = cupy.empty(flush_bytes, dtype=cupy.uint8)
    kernel = cupy.RawKernel(FLOOR_SOURCE, "kl_floor", options=("-std=c++17",))
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    medians = {}
    for per_sm in FLOOR_GRIDS_PER_SM:
        grid = sms * per_sm
        partial = cupy.empty(grid * FLOOR_BLOCK // 32, dtype=cupy.float32)
        args = (src, dst, cupy.int64(n_in), cupy.int64(n_out), partial)
        times = []
        for rep in range(3 + repeats):
            flush.fill(rep & 0xFF)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            kernel((grid,), (FLOOR_BLOCK,), args)
            end.record()
            end.synchronize()
            if rep >= 3:
                times.append(cupy.cuda.get_elapsed_time(start, end))
        medians[grid] = statistics.median(times)
    del src, dst, flush
    cupy.get_default_memory_pool().free_all_blocks()
    best = min(medians, key=medians.get)
    return {"ms": medians[best], "grid": best, "block": FLOOR_BLOCK, "read_bytes": read_bytes,
            "write_bytes": write_bytes, "ms_by_grid": {str(g): round(t, 6) for g, t in medians.items()},
            "what": f"float4 read of the inputs and write of the outputs once, after a {flush_bytes >> 20} MiB "
                    f"write flush, CUDA events, median of {repeats}, best of {len(medians)} grids"}


def floor_figures(floor: dict | None, floor_ms: float, best_ms: float | None) -> dict:
    """The protocol floor beside the roofline: the fraction of the roofline the floor itself reaches
    (about the most a kernel of this problem can show under the protocol) and the best kernel's fraction
    of the floor (above 1 where the search beat the plain kernel)."""
    if not floor or not floor.get("ms"):
        return {"protocol_floor": floor, "protocol_ceiling_fraction_of_roofline": None,
                "best_fraction_of_protocol_floor": None}
    return {"protocol_floor": floor,
            "protocol_ceiling_fraction_of_roofline": round(floor_ms / floor["ms"], 4),
            "best_fraction_of_protocol_floor": round(floor["ms"] / best_ms, 4) if best_ms else None}


# ---- one kernel -----------------------------------------------------------------------------------
def auto_knob_template(spec, folder: Path) -> tuple[TemplateGenerator | None, list[str]]:
    """The template generator of the kernel's automatic knobs (what the problem page proposes)."""
    proposal = propose_knobs(spec)
    if not proposal.knobs:
        return None, proposal.skipped
    chosen = {k.name: list(k.values) for k in proposal.knobs}
    family_toml, template = family_from_knobs(spec, chosen, proposal.constraints)
    toml_text = (folder / "problem.toml").read_text()
    family_spec = parse_problem(toml_text.rstrip() + "\n\n" + family_toml, spec.reference.source, template)
    points = valid_variants(family_spec)
    space = KnobSpace(knobs=chosen, points=points)
    return TemplateGenerator(space, lambda knobs: render_variant(family_spec, knobs).to_dict()), \
        [f"{k.name} ({k.kind}, {k.where})" for k in proposal.knobs]


def search_kernel(name: str, runner, measure, bandwidth_gbs: float, budget: int, deadline: float,
                  seed: int, *, children: int = 16, root_children: int = 32, per_step: int = 8, parents: int = 1,
                  min_children: int = 0, compile_share: float = 0.0, overlap: bool = False,
                  floor_of=None) -> dict:
    folder = OWN / name
    spec = load_problem(folder)
    reference = reference_candidate(spec).to_dict()
    case = dict(spec.default_case.sizes)
    roofline_bytes, floor_ms = roofline_of(spec, bandwidth_gbs)
    problem = {"name": spec.name, "title": spec.title, "description": spec.description, "sizes": case,
               "flops": float(spec.roofline.flops.evaluate(case)) if spec.roofline.flops is not None else None,
               "bytes": roofline_bytes, "tolerance_allows_fast_math": False}
    started = time.perf_counter()
    floor = floor_of(*moved_bytes(spec)) if floor_of is not None else None
    reference_result = measure(spec, Candidate.from_dict(reference, spec))
    reference_ms = reference_result.candidate.median_ms if reference_result.candidate else None
    template, knobs_found = auto_knob_template(spec, folder)
    generators = [RecipeGenerator()] + ([template] if template is not None else [])
    port = RunnerPort(runner, spec, measure, asynchronous=overlap)
    hardware = asdict(runner.hardware(spec)) if hasattr(runner, "hardware") and runner.hardware(spec) else {}
    settings = SearchSettings(
        # Wide steps: a step's compile checks run at once on every core, so more children and more
        # measurements per step spend less of the wall time waiting for nvcc.
        policy=PolicySettings(gpu_budget=budget, max_gpu_per_step=per_step, min_gpu_per_step=1),
        tree=TreeOptions(log_rewards=True), children_per_expansion=children, root_children=root_children, seed=seed,
        # Several parents a step: their children are checked in one batch (one compiler start on every core).
        parents_per_step=parents, min_children_per_step=min_children,
        # A step whose compile batch is costly against a measurement measures more of what it compiled.
        compile_share_target=compile_share,
        # With the measuring thread: the next step's children compile while the GPU measures this step's.
        prefetch_while_measuring=overlap)
    driver = SearchDriver(port=port, generator=CombinedGenerator(generators), surrogate=RooflineSurrogate(),
                          reference=reference, hardware=hardware, problem=problem, settings=settings,
                          reference_ms=reference_ms)
    search_started = time.perf_counter()
    stopped = "budget"
    steps: list[list[int]] = []   # per step: parents expanded, children created, measurements requested
    while True:
        if time.perf_counter() > deadline:
            stopped = "deadline"
            break
        report = driver.step()
        if report.status in ("prefetched", "waiting"):
            # this step's children are compiled; now its results are needed
            if port.deliver(driver) == 0 and report.status == "waiting":
                stopped = "waiting for measurements that were never started"   # not expected: a port bug
                break
            continue
        if report.status != "expanded":
            stopped = report.status
            break
        steps.append([len(report.expanded), len(report.created), len(report.measured_requests)])
        port.start_measuring()
    port.deliver(driver)               # what a deadline left on the measuring thread still counts
    wall = time.perf_counter() - search_started
    exposed = port.exposed_compile_s()
    ok = [m for m in port.measured if m["status"] == "ok" and m["candidate_ms"]]
    best = min(ok, key=lambda m: m["candidate_ms"]) if ok else None
    failed_proposals = sorted({p["reason"] for n in driver.tree.nodes.values() for p in n.failed_proposals})
    # The best kernel found is the reference itself until a candidate beats it.
    times = [t for t in ((best or {}).get("candidate_ms"), reference_ms) if t]
    best_ms = min(times) if times else None
    winner = best["name"] if best and reference_ms and best["candidate_ms"] < reference_ms else "reference"
    recipe = winner[len(RECIPE_NAME_PREFIX):].split(":", 1)[0] if winner.startswith(RECIPE_NAME_PREFIX) else \
        ("automatic knobs" if winner != "reference" else None)
    result = {
        "name": name,
        "problem": spec.name,
        "sizes": case,
        "roofline_bytes": roofline_bytes,
        "roofline_floor_ms": floor_ms,
        "reference_ms": reference_ms,
        "best_ms": best_ms,
        "reference_fraction_of_roofline": round(floor_ms / reference_ms, 4) if reference_ms else None,
        "best_fraction_of_roofline": round(floor_ms / best_ms, 4) if best_ms else None,
        "speedup_over_reference": round(reference_ms / best_ms, 4) if best_ms and reference_ms else None,
        "measurements": driver.counters.measurements_requested,
        "measured_ok": len(ok),
        "measured_failed": len(port.measured) - len(ok),
        "first_measurement_at_goal": next((i + 1 for i, m in enumerate(port.measured) if m["candidate_ms"]
                                           and floor_ms / m["candidate_ms"] >= GOAL and m["status"] == "ok"), None),
        "compile_checks": port.compile_checks,
        "compile_failures": driver.counters.compile_failures,
        "compile_s": round(port.compile_s, 3),
        "compile_batches": port.compile_batches,
        "steps": {"count": len(steps), "parents_children_measured": steps},
        "driver_times": driver.times.to_dict(),
        "measure_s": round(port.measure_s, 3),
        "search_wall_s": round(wall, 3),
        # the share the goal reads: compile time the search waited for (all of it without --overlap)
        "compile_share_of_wall": round(exposed / wall, 4) if wall > 0 else None,
        "compile_exposed_s": round(exposed, 3),
        "compile_batches_share_of_wall": round(port.compile_s / wall, 4) if wall > 0 else None,
        "overlap": overlap,
        "sass_counts_s": round(port.sass_s, 3),
        "sass_share_of_wall": round(port.sass_s / wall, 4) if wall > 0 else None,
        "measurement_phase_median_s": _phase_medians(port.measured),
        "winning_recipe": recipe,
        "winning_candidate": winner,
        "best_source": None,
        "stopped_by": stopped,
        "automatic_knobs": knobs_found,
        "recipes_that_cannot_apply": failed_proposals,
        "compiled_with": (best or {}).get("compiled_with"),
        "measured": port.measured,
        "kernel_wall_s": round(time.perf_counter() - started, 3),
    }
    node = next((n for n in driver.tree.nodes.values() if best and n.candidate.get("name") == best["name"]), None)
    if node is not None:
        result["best_source"] = node.candidate["source"]
        result["best_launch"] = node.candidate["launch"]
    result["meets_goal"] = bool(result["best_fraction_of_roofline"] and result["best_fraction_of_roofline"] >= GOAL)
    result.update(floor_figures(floor, floor_ms, best_ms))
    return result


def _phase_medians(measured: list[dict]) -> dict:
    """Median seconds of each phase of a measurement (the runner's phase_s: compile, the worker's
    round trip, waiting for SASS counts, and the worker's own load/validate/time phases), and of
    the whole request: where a measurement's wall time goes."""
    phases: dict[str, list[float]] = {"request": [m["wall_s"] for m in measured if m.get("wall_s") is not None]}
    for m in measured:
        for phase, seconds in (m.get("phase_s") or {}).items():
            if isinstance(seconds, (int, float)):
                phases.setdefault(phase, []).append(seconds)
    return {phase: round(statistics.median(v), 4) for phase, v in phases.items() if v}


# ---- the app's compile path against the records -------------------------------------------------------
def app_vs_record(runner, measure, sample: int, deadline: float, seed: int) -> dict:
    spec = load_problem(TRANSPOSE)
    records = [json.loads(line) for line in gzip.open(TRANSPOSE / "records" / "h200.jsonl.gz", "rt")]
    variants = [r for r in records if r.get("knobs") and r.get("status") == "ok" and r.get("speedup")]
    rng = random.Random(seed)
    chosen = rng.sample(variants, min(sample, len(variants)))
    rows = []
    for record in chosen:
        if time.perf_counter() > deadline:
            break
        result = measure(spec, render_variant(spec, record["knobs"]))
        row = {"knobs": record["knobs"], "recorded_speedup": record["speedup"], "status": result.status,
               "speedup": result.speedup,
               "recorded_registers": (record.get("compiler") or {}).get("registers"),
               "registers": result.compiler.registers if result.compiler else None}
        if result.ok and result.speedup:
            row["rel_diff"] = abs(result.speedup - record["speedup"]) / record["speedup"]
        rows.append(row)
    diffs = [r["rel_diff"] for r in rows if "rel_diff" in r]
    return {"family": "transpose", "sampled": len(chosen), "remeasured": len(diffs),
            "max_rel_diff": round(max(diffs), 4) if diffs else None,
            "median_rel_diff": round(statistics.median(diffs), 4) if diffs else None,
            "below_record": sum(1 for r in rows if r.get("speedup") and r["speedup"] < r["recorded_speedup"]),
            "rows": rows}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=150, help="GPU measurements per kernel")
    parser.add_argument("--deadline-s", type=float, default=240.0, help="stop cleanly before this many seconds")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--backend", default="cupy", choices=["cupy", "pycuda", "fake"])
    parser.add_argument("--app-sample", type=int, default=12, help="recorded transpose variants re-measured")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parents", type=int, default=4,
                        help="parents expanded per step, their children compiled in one batch (1: one a step)")
    parser.add_argument("--min-children", type=int, default=16,
                        help="a step expands more parents until it has this many children (0: off)")
    parser.add_argument("--gpu-per-step", type=int, default=8,
                        help="the most GPU measurements a step makes (the policy's cap; the compile share target "
                             "asks for more where a step's compile batch is costly)")
    parser.add_argument("--compile-share", type=float, default=0.25,
                        help="a step whose compile batch would take more than this share of its wall time "
                             "measures more of what it compiled (0: off)")
    parser.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="measure on a thread of its own and compile the next step meanwhile "
                             "(settings.prefetch_while_measuring, as a run from the web form does with its GPU "
                             "worker); --no-overlap: each step compiles only once the one before is measured")
    parser.add_argument("--out", default=None)
    parser.add_argument("--floors-only", action="store_true",
                        help="only the protocol floor of each kernel (no search), into own_kernels_floors_<gpu>_<date>.json")
    parser.add_argument("--best-from", help="with --floors-only: a result file whose best times are set beside the floors")
    args = parser.parse_args(argv)
    if args.floors_only:
        return floors_only(args, parser)
    started = time.perf_counter()
    end = started + args.deadline_s
    names = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in names if not (OWN / k / "problem.toml").is_file()]
    if unknown:
        parser.error(f"no own kernel {unknown[0]!r}; known: {', '.join(KERNELS)}")
    machine = "h200" if args.backend != "fake" else "cpu-dryrun"
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"own_kernels_{machine}_{DATE}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    runner = Runner("static" if args.backend == "fake" else args.backend, settings=SETTINGS)
    if args.backend == "fake":
        measure = fake_measure
        bandwidth = {"gbs": 4232.0, "what": "not measured (dry run): the H200 reference figure of "
                                            "/work/shared/H200-REFERENCE.md"}
    else:
        def measure(spec, candidate):
            return runner.measure(spec, candidate, timeout_s=60.0)
        bandwidth = copy_bandwidth_gbs()
        bandwidth["reference_doc_gbs"] = 4232.0  # /work/shared/H200-REFERENCE.md, 2026-11-29, for comparison
    doc = {"benchmark": "own_kernels", "machine": machine, "date": DATE, "backend": args.backend,
           "budget_per_kernel": args.budget, "parents_per_step": args.parents,
           "min_children_per_step": args.min_children, "compile_share_target": args.compile_share,
           "max_gpu_per_step": args.gpu_per_step, "overlap": args.overlap,
           "deadline_s": args.deadline_s,
           "goal_fraction_of_roofline": GOAL,
           "copy_bandwidth": bandwidth, "settings": asdict(SETTINGS), "surrogate": "roofline",
           "generators": "recipes + template of the automatic knobs", "kernels": [],
           "app_vs_record_max_rel_diff": None}
    if args.backend == "fake":
        doc["note"] = "CPU dry run: measurements are a hash of the source, not timings; speed figures mean nothing."
    # The app-vs-record check is short and done first, so a deadline cannot starve it.
    app_deadline = min(end, time.perf_counter() + 0.12 * args.deadline_s)
    if args.backend != "fake":
        doc["app_vs_record"] = app_vs_record(runner, measure, args.app_sample, app_deadline, args.seed)
        doc["app_vs_record_max_rel_diff"] = doc["app_vs_record"]["max_rel_diff"]
    for i, name in enumerate(names):
        left = end - time.perf_counter()
        if left <= 5:
            doc["kernels"].append({"name": name, "skipped": "the deadline was reached before its search"})
            continue
        share = left / (len(names) - i)
        print(f"[{time.perf_counter() - started:6.1f} s] {name}: searching for up to {share:.0f} s", flush=True)
        try:
            doc["kernels"].append(search_kernel(name, runner, measure, bandwidth["gbs"], args.budget,
                                                time.perf_counter() + share, args.seed, parents=args.parents,
                                                min_children=args.min_children, compile_share=args.compile_share,
                                                per_step=args.gpu_per_step, overlap=args.overlap,
                                                floor_of=None if args.backend == "fake" else protocol_floor))
        except Exception as exc:  # noqa: BLE001 - one kernel's failure is reported, the others still run
            doc["kernels"].append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
        doc["wall_s"] = round(time.perf_counter() - started, 2)
        out.write_text(json.dumps(doc, indent=1, default=str))
    runner.close()
    doc["wall_s"] = round(time.perf_counter() - started, 2)
    out.write_text(json.dumps(doc, indent=1, default=str))
    print_table(doc)
    print(f"wrote {out}")
    return doc


def floors_only(args, parser) -> dict:
    """The protocol floor of each kernel beside its roofline, and, from --best-from, the best time found."""
    names = [k for k in args.kernels.split(",") if k]
    if args.backend == "fake":
        parser.error("--floors-only times kernels on a GPU; there is no dry run of it")
    best_from = {}
    if args.best_from:
        best_from = {k["name"]: k for k in json.loads(Path(args.best_from).read_text())["kernels"] if "best_ms" in k}
    bandwidth = copy_bandwidth_gbs()
    doc = {"benchmark": "own_kernels_floors", "machine": "h200", "date": DATE, "copy_bandwidth": bandwidth,
           "best_from": args.best_from, "kernels": []}
    for name in names:
        spec = load_problem(OWN / name)
        _, floor_ms = roofline_of(spec, bandwidth["gbs"])
        best = best_from.get(name, {})
        row = {"name": name, "roofline_floor_ms": floor_ms, "best_ms": best.get("best_ms"),
               "best_fraction_of_roofline": round(floor_ms / best["best_ms"], 4) if best.get("best_ms") else None}
        row.update(floor_figures(protocol_floor(*moved_bytes(spec)), floor_ms, best.get("best_ms")))
        doc["kernels"].append(row)
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"own_kernels_floors_h200_{DATE}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"copy bandwidth {bandwidth['gbs']:.0f} GB/s")
    print(f"{'kernel':<13}{'floor us':>9}{'ceiling':>9}{'best':>7}{'of floor':>10}")
    for k in doc["kernels"]:
        print(f"{k['name']:<13}{k['protocol_floor']['ms'] * 1e3:>9.2f}{k['protocol_ceiling_fraction_of_roofline']:>9.1%}"
              f"{k['best_fraction_of_roofline'] or 0:>7.1%}{k['best_fraction_of_protocol_floor'] or 0:>10.1%}")
    print(f"wrote {out}")
    return doc


def print_table(doc: dict) -> None:
    print(f"\ncopy bandwidth {doc['copy_bandwidth']['gbs']:.0f} GB/s; goal: best >= {GOAL:.0%} of roofline; "
          "ceiling: the protocol floor's fraction of the roofline")
    print(f"{'kernel':<13}{'ref':>7}{'best':>7}{'ceiling':>9}{'meas':>6}{'compile':>9}  winner")
    for k in doc["kernels"]:
        if "reference_fraction_of_roofline" not in k:
            print(f"{k['name']:<13} {k.get('skipped') or k.get('error')}")
            continue
        ceiling = k.get("protocol_ceiling_fraction_of_roofline")
        print(f"{k['name']:<13}{k['reference_fraction_of_roofline'] or 0:>7.0%}{k['best_fraction_of_roofline'] or 0:>7.0%}"
              f"{f'{ceiling:.0%}' if ceiling else '-':>9}"
              f"{k['measurements']:>6}{k['compile_share_of_wall'] or 0:>9.0%}  {k['winning_recipe']} ({k['stopped_by']})")
    if doc.get("app_vs_record_max_rel_diff") is not None:
        print(f"app vs record (transpose): max rel diff {doc['app_vs_record_max_rel_diff']:.1%}")


if __name__ == "__main__":
    main()
