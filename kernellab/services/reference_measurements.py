"""The reference's time and Nsight Compute counters as a run's GPU worker measured them, kept on the problem.

A bundled problem's recording holds its reference's measurement and counters, and the learned surrogate reads
them as features: how far the reference runs from its roofline (which bounds any speedup), how its loads are
served (the program surrogate of PyTorch problems reads the reference's time too). An uploaded problem has no
recording. Every GPU measurement times the reference beside the candidate, and the worker profiles a CUDA
reference once with Nsight Compute (measurement.measure_for_verification); both are kept here, per target GPU, so
that the run's next step forecasts with them and every later run starts with them.

Problem.reference_measurements = {gpu: entry}, the entry holding "timing" ({median_ms, iqr_ms, n, ...}),
"hardware", "run_id" and "measured_at" of the first measurement; then either "profiler" ({counter: value}),
"profiler_hardware" and "profiled_in_run", or "profiler_error" (why not) and "profile_attempts". The first
measurement's timing stays (a later one would move every feature of a run under way); a recording's reference,
where there is one, comes first (RunContext)."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from kernellab.models import Problem
from kernellab.selectors.problems import reference_measurement

# A reference whose profile failed this many times is not profiled again (ncu missing, a kernel it cannot
# replay): each try costs an ncu start of a few seconds on the GPU worker.
PROFILE_ATTEMPTS = 3
# Where a measurement result carries the reference's counters (measure_for_verification) and why there are none.
RESULT_KEY = "reference_profiler"
ERROR_KEY = "ncu (reference)"
GPU_BACKENDS = ("cupy", "pycuda")
# A PyTorch (KernelBench) reference is timed by the torch backend: its time is kept (the program surrogate reads
# it, as it does the recorded tasks'); it launches many kernels, so it is not profiled.
TIMING_BACKENDS = GPU_BACKENDS + ("torch",)


def reference_profile_wanted(problem: Problem, gpu: str, *, recorded_profile: bool) -> bool:
    """Whether a measurement on `gpu` should also profile the reference: a CUDA reference whose recording (if
    any) holds no counters, not profiled yet, and not given up on."""
    if recorded_profile or _pytorch(problem):
        return False
    kept = reference_measurement(problem, gpu)
    return not kept.get("profiler") and int(kept.get("profile_attempts") or 0) < PROFILE_ATTEMPTS


def reference_measurement_keep(*, problem_id: int, gpu: str, run_id: int | None, result: dict) -> bool:
    """Keep what a successful measurement `result` says of the reference: its timing (the first one only) and the
    counters measure_for_verification added (or why they are missing). Returns whether anything was kept."""
    if result.get("status") != "ok" or result.get("backend") not in TIMING_BACKENDS:
        return False  # a replayed or estimated result says nothing new of the reference
    timing = result.get("reference") or {}
    counters = result.get(RESULT_KEY) or {}
    error = (result.get("observer_errors") or {}).get(ERROR_KEY)
    if not timing.get("median_ms") and not counters and not error:
        return False
    gpu = gpu.lower()
    with transaction.atomic():
        problem = Problem.objects.select_for_update().get(pk=problem_id)
        if _pytorch(problem):
            counters, error = {}, None
        kept = dict((problem.reference_measurements or {}).get(gpu) or {})
        before = dict(kept)
        hardware = dict(result.get("hardware") or {})
        if timing.get("median_ms") and not kept.get("timing"):
            kept.update(timing=dict(timing), hardware=hardware, run_id=run_id,
                        measured_at=timezone.now().isoformat(timespec="seconds"))
        if counters and not kept.get("profiler"):
            kept.pop("profiler_error", None)
            kept.update(profiler=dict(counters), profiler_hardware=hardware, profiled_in_run=run_id)
        elif error and not kept.get("profiler"):
            kept.update(profiler_error=str(error)[:500], profile_attempts=int(kept.get("profile_attempts") or 0) + 1)
        if kept == before:
            return False
        problem.reference_measurements = {**(problem.reference_measurements or {}), gpu: kept}
        problem.save(update_fields=["reference_measurements"])
    return True


def _pytorch(problem: Problem) -> bool:
    from gpu_runner.spec import reference_kind

    return reference_kind(problem.spec_toml) == "pytorch"
