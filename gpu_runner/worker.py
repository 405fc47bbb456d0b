"""The isolated worker: one process, one GPU context, one problem at a time.

The parent (backends/gpu.py) sends jobs through sandbox.Sandbox; the worker answers with Evidence.
After a sticky CUDA error (illegal address, hang, ...) it answers and exits, and the parent starts
a fresh worker for the next candidate.
"""
from __future__ import annotations

import importlib
import math
import os
import time
import traceback
from contextlib import ExitStack
from typing import Any, Callable

from .backends.base import CompileFailed, Device, DeviceError, classify_cuda_error
from .candidate import Candidate
from .compiler import SOURCE_NAME
from .directives import find_forbidden_directive
from .evidence import Evidence
from .plan import Inputs, Side, buffer_bytes
from .runtime_ops import RuntimeOps, derive_seed
from .settings import MeasureSettings
from .spec import CudaReference, Problem, SizeCase
from .timing import Timer, escape_probe, flush_size, time_sides
from .validation import compare_outputs, validate_case, wait_for

SideFactory = Callable[[SizeCase, Inputs], Side]


class WorkerState:
    def __init__(self, device: Device):
        self.device = device
        self.hardware = device.hardware()
        self.ops = RuntimeOps(device, self.hardware.sm_count)
        self.flush = device.alloc(flush_size(self.hardware.l2_bytes))
        self.memory_limit = 0
        self._references: dict[str, dict[str, Any]] = {}
        self.reference_timings: dict[tuple, tuple[float, list[float]]] = {}

    def reference_functions(self, problem: Problem, cubin: bytes | None = None) -> dict[str, Any]:
        """The reference's kernels, from the cubin the parent compiled (the one compile path) or, for a
        caller that sends none, from the backend's own compiler."""
        cached = self._references.get(problem.spec_hash)
        if cached is None:
            reference = problem.reference
            if not isinstance(reference, CudaReference):
                raise DeviceError("reference", f"a {reference.kind} reference is not supported yet", False)
            names = sorted({s.kernel for s in reference.launch if hasattr(s, "kernel")})
            try:
                module = self.device.load_cubin(cubin) if cubin is not None else \
                    compile_checked(self.device, reference.source, list(reference.compile_options), names)
            except CompileFailed as exc:
                raise DeviceError("reference", f"the reference does not compile: {exc.log[-500:]}", False) from None
            cached = {name: self.device.function(module, name) for name in names}
            self._references = {problem.spec_hash: cached}
            self.reference_timings = {}
        return cached


def compile_checked(device: Device, source: str, options: list[str], names: list[str]) -> Any:
    """The backend's own compiler (NVRTC or pycuda's nvcc) only after the directive check passed."""
    refusal = find_forbidden_directive(source)
    if refusal is not None:
        raise CompileFailed(f"{SOURCE_NAME}({refusal.line}): error: {refusal.reason}")
    return device.compile(source, options, names)


def run_job(state: WorkerState, job: dict) -> Evidence:
    evidence = Evidence(hardware=state.hardware)
    problem: Problem = job["problem"]
    settings: MeasureSettings = job["settings"]
    started = time.perf_counter()
    try:
        evidence.phase = "reference compile"
        ref_functions = state.reference_functions(problem, job.get("reference_cubin"))
        evidence.phase = "load"
        make_side = _candidate_sides(state, job, evidence) if job["kind"] == "measure" else \
            _vendor_sides(state, job)
        if make_side is None:
            return evidence
        evidence.phase_s["load"] = time.perf_counter() - started
        _measure(state, problem, ref_functions, make_side, job, settings, evidence)
    except DeviceError as exc:
        _record_error(evidence, exc)
    except Exception as exc:   # a CUDA error from the backend library, or a bug: report, never die silently
        error = classify_cuda_error(exc)
        if error.kind == "cuda-error" and "cuda" not in str(exc).lower():
            error = DeviceError("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}",
                                sticky=True)
        _record_error(evidence, error)
    evidence.phase_s["total"] = time.perf_counter() - started
    return evidence


def _record_error(evidence: Evidence, error: DeviceError) -> None:
    evidence.error_kind = error.kind
    evidence.error_message = error.message
    evidence.sticky = error.sticky
    if evidence.phase.startswith("reference") and error.kind not in ("timeout",):
        evidence.error_kind = "reference"


def _candidate_sides(state: WorkerState, job: dict, evidence: Evidence) -> SideFactory | None:
    candidate: Candidate = job["candidate"]
    device = state.device
    names = candidate.kernel_names
    try:
        if job.get("cubin") is not None:
            module = device.load_cubin(job["cubin"])
        else:
            module = compile_checked(device, candidate.source, list(candidate.compile_options), names)
    except CompileFailed as exc:
        evidence.compile_log = exc.log
        return None
    functions = {}
    for name in names:
        try:
            functions[name] = device.function(module, name)
        except Exception as exc:  # noqa: BLE001 - the backends raise their own lookup errors
            evidence.compile_log = (f"{name}: error: the kernel '{name}' is not in the compiled module; declare "
                                    f"it extern \"C\" __global__ ({type(exc).__name__})")
            return None
    evidence.kernel_attributes = {n: device.kernel_attributes(f) for n, f in functions.items()} \
        if hasattr(device, "kernel_attributes") else {}

    def make(case: SizeCase, inputs: Inputs) -> Side:
        return Side("candidate", device, state.ops, job["problem"], case.sizes, candidate.launch, functions,
                    candidate.temps, inputs.buffers)
    return make


def _vendor_sides(state: WorkerState, job: dict) -> SideFactory:
    from .vendor import vendor_side

    def make(case: SizeCase, inputs: Inputs) -> Side:
        return vendor_side(state.device, state.ops, job["problem"], case, inputs)
    return make


def _measure(state: WorkerState, problem: Problem, ref_functions: dict, make_side: SideFactory, job: dict,
             settings: MeasureSettings, evidence: Evidence) -> None:
    device, ops = state.device, state.ops
    seed = int(job["seed"])
    extra = list(job["candidate"].temps) if job["kind"] == "measure" else []
    for case in problem.sizes:
        need = buffer_bytes(problem.args, case.sizes) * 2 + buffer_bytes(extra, case.sizes)
        evidence.memory_bytes = max(evidence.memory_bytes, need)
        if need > state.memory_limit:
            raise DeviceError("memory-limit", f"size case '{case.name}' needs {need / 2**30:.2f} GiB of buffers, "
                                              f"over the limit of {state.memory_limit / 2**30:.2f} GiB", False)
    ordered = list(problem.sizes[1:]) + [problem.sizes[0]]
    for case in ordered:
        with ExitStack() as stack:
            evidence.phase = f"allocate:{case.name}"
            inputs = Inputs(device, ops, problem, case.sizes)
            stack.callback(inputs.release)
            ref = Side("reference", device, ops, problem, case.sizes, problem.reference.launch, ref_functions, (),
                       inputs.buffers)
            stack.callback(ref.release)
            cand = make_side(case, inputs)
            stack.callback(cand.release)
            t0 = time.perf_counter()
            passed = validate_case(device, ops, problem, case, inputs, ref, cand, seed=seed,
                                   sets=settings.validation_sets, timeout_s=settings.kernel_timeout_s,
                                   evidence=evidence, check_memoisation=settings.check_memoisation)
            evidence.phase_s[f"validate:{case.name}"] = time.perf_counter() - t0
            if not passed:
                return
            if case is not problem.sizes[0] or not job.get("timing", True):
                continue
            t0 = time.perf_counter()
            evidence.phase = "timing"
            timer = Timer(device, inputs, state.flush, derive_seed(seed, "timing"), settings.kernel_timeout_s)
            key = (problem.spec_hash, seed, settings.warmup, settings.min_reps, settings.max_reps,
                   settings.target_timing_ms)
            cached = state.reference_timings.get(key)
            fresh = cached is not None and time.monotonic() - cached[0] < settings.reference_cache_s
            if fresh:
                # Recording: the reference was timed alternately earlier in this worker on this GPU.
                (cand_ms,) = time_sides(timer, [cand], warmup=settings.warmup, min_reps=settings.min_reps,
                                        max_reps=settings.max_reps, target_ms=settings.target_timing_ms)
                ref_ms = cached[1]
                evidence.phase_s["reference_age"] = time.monotonic() - cached[0]
            else:
                ref_ms, cand_ms = time_sides(timer, [ref, cand], warmup=settings.warmup,
                                             min_reps=settings.min_reps, max_reps=settings.max_reps,
                                             target_ms=settings.target_timing_ms)
                if settings.reference_cache_s > 0:
                    state.reference_timings[key] = (time.monotonic(), ref_ms)
            evidence.reference_ms, evidence.candidate_ms = ref_ms, cand_ms
            evidence.phase_s["timing"] = time.perf_counter() - t0
            last_rep = len(cand_ms) - 1
            evidence.phase = "check after timing"
            if fresh:
                timer.run_untimed(ref, last_rep)    # the reference's output for the last timed inputs
            for check in compare_outputs(ops, problem, case, last_rep, ref, cand):
                check.set_index = -1
                evidence.post_checks.append(check)
            if any(not c.passed for c in evidence.post_checks):
                return
            evidence.phase = "timer-escape probe"
            t0 = time.perf_counter()
            evidence.escape = escape_probe(device, ops, cand, settings.escape_runs, settings.kernel_timeout_s)
            evidence.phase_s["escape"] = time.perf_counter() - t0
            if job.get("energy"):
                evidence.phase = "energy"
                _energy(device, cand, sorted(cand_ms)[len(cand_ms) // 2], settings, evidence)
    evidence.phase = "done"


def _energy(device: Device, side: Side, median_ms: float, settings: MeasureSettings, evidence: Evidence) -> None:
    from .observers.nvml import NvmlEnergyObserver, ObserverUnavailable

    try:
        observer = NvmlEnergyObserver()
    except ObserverUnavailable as exc:
        evidence.energy_error = str(exc)
        return
    launches = int(min(1_000_000, max(10, math.ceil(settings.energy_window_s * 1e3 / max(median_ms, 1e-4)))))
    wait_for(device, settings.kernel_timeout_s)
    observer.before_start()
    for _ in range(launches):
        side.run()
    wait_for(device, settings.kernel_timeout_s * max(1, launches))
    observer.after_finish()
    try:
        evidence.energy = observer.get_results(launches)
    except ObserverUnavailable as exc:
        evidence.energy_error = str(exc)


def serve(conn, device_module: str, memory_fraction: str = "0.8") -> None:
    """The worker's main loop (run by sandbox.py in the child process)."""
    try:
        device = importlib.import_module(device_module).make_device()
        state = WorkerState(device)
        total = state.hardware.memory_bytes
        state.memory_limit = int(total * float(memory_fraction))
        device.set_memory_limit(state.memory_limit + (state.flush.nbytes + (64 << 20)))
    except Exception as exc:  # noqa: BLE001 - report why no GPU worker could start
        conn.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    major, minor = state.hardware.compute_capability.split(".")
    conn.send(("hello", {"hardware": state.hardware, "arch": f"sm_{major}{minor}", "pid": os.getpid()}))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "exit":
            return
        if kind == "ping":
            conn.send(("pong", None))
            continue
        evidence = run_job(state, payload)
        conn.send(("evidence", evidence))
        if evidence.sticky:
            conn.close()
            os._exit(0)
