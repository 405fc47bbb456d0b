"""Turn the worker's evidence into a MeasurementResult status, reason and figures."""
from __future__ import annotations

from . import guards
from .evidence import Evidence, OutputCheck
from .result import MeasurementResult, TimingStats
from .settings import MeasureSettings
from .spec import Problem
from .timing import summarize

_RUNTIME_REASONS = {
    "illegal-address": "an illegal memory address was accessed",
    "misaligned-address": "a misaligned memory address was accessed",
    "out-of-memory": "the GPU ran out of memory",
    "too-many-resources": "the launch asks for more registers or shared memory than a multiprocessor has",
    "invalid-launch": "the launch configuration is invalid (block or grid size, or shared memory)",
    "launch-failure": "the kernel failed during its run",
    "illegal-instruction": "the kernel executed an illegal instruction",
    "device-assert": "a device-side assert fired",
    "memory-limit": "the candidate needs more GPU memory than the worker's limit",
    "crash": "the worker process crashed",
    "host-memory": "the worker process exceeded its host memory limit",
}


def judge(problem: Problem, evidence: Evidence, settings: MeasureSettings, *, backend: str, seed: int
          ) -> MeasurementResult:
    result = MeasurementResult(status="ok", backend=backend, seed=seed, hardware=evidence.hardware,
                               problem=problem.name, size_case=problem.default_case.name)
    result.phase_s = {k: round(v, 4) for k, v in evidence.phase_s.items()}
    if evidence.energy is not None:
        result.energy = evidence.energy
    if evidence.energy_error:
        result.observer_errors["nvml"] = evidence.energy_error
    _fill_errors(result, evidence.checks)

    if evidence.compile_log is not None:
        return _status(result, "failed-compile", "The candidate does not compile: " + _first_error(evidence.compile_log))
    if evidence.error_kind == "timeout":
        return _status(result, "failed-timeout", f"The candidate timed out during {evidence.phase}: "
                                                 f"{evidence.error_message}.")
    if evidence.error_kind == "vendor":
        return _status(result, "unavailable", f"No vendor baseline here: {evidence.error_message}.")
    if evidence.error_kind == "reference":
        return _status(result, "unavailable", f"The reference failed: {evidence.error_message}")
    if evidence.error_kind:
        what = _RUNTIME_REASONS.get(evidence.error_kind, "a CUDA error occurred")
        return _status(result, "failed-runtime", f"The candidate failed during {evidence.phase}: {what} "
                                                 f"({evidence.error_message}).")
    for change in evidence.input_changes:
        if change.by == "reference":
            return _status(result, "unavailable", f"The problem's reference modifies its input '{change.arg}'; "
                                                  "fix the spec (declare it inout).")
    reason = guards.modified_input(evidence)
    if reason:
        return _status(result, "rejected-guard", reason)
    for check in evidence.checks:
        if check.passed:
            continue
        reason = guards.unwritten_output(check) or guards.memoised(evidence)
        if reason:
            return _status(result, "rejected-guard", reason)
        return _status(result, "failed-correctness", _wrong(check))

    reason = guards.stale_after_timing(evidence)
    if reason:
        return _status(result, "rejected-guard", reason)
    if not evidence.candidate_ms or not evidence.reference_ms:
        return _status(result, "failed-runtime", f"No timing was taken (stopped during {evidence.phase}).")
    result.reference = summarize(evidence.reference_ms)
    result.candidate = summarize(evidence.candidate_ms)
    result.speedup = result.reference.median_ms / result.candidate.median_ms if result.candidate.median_ms > 0 \
        else None
    reason = guards.timer_escape(evidence.escape, margin_ms=settings.escape_margin_ms, ratio=settings.escape_ratio)
    if reason:
        return _status(result, "rejected-guard", reason)
    reason = guards.beyond_roofline(problem, problem.default_case, result.candidate.median_ms, evidence.hardware,
                                    settings.roofline_margin)
    if reason:
        return _status(result, "rejected-guard", reason)
    reused = evidence.phase_s.get("reference_age")
    note = f"; reference timed {reused:.0f} s earlier in this worker" if reused is not None else ""
    result.reason = (f"Correct on {len({(c.case, c.set_index) for c in evidence.checks})} input set(s); "
                     f"speedup {result.speedup:.3f}x ({result.reference.median_ms:.4f} ms -> "
                     f"{result.candidate.median_ms:.4f} ms, n={result.candidate.n}{note}).")
    return result


def _status(result: MeasurementResult, status: str, reason: str) -> MeasurementResult:
    result.status = status
    result.reason = reason
    return result


def _fill_errors(result: MeasurementResult, checks: list[OutputCheck]) -> None:
    finite = [c for c in checks if c.unwritten == 0]
    if finite:
        result.max_abs_error = max(c.max_abs for c in finite)
        result.max_rel_error = max(c.max_rel for c in finite)


def _wrong(check: OutputCheck) -> str:
    detail = ""
    if check.first_bad is not None:
        detail = f"; first at index {check.first_bad}: got {check.cand_value!r}, expected {check.ref_value!r}"
    nan = f", {check.nan} NaN where the reference has none" if check.nan else ""
    return (f"Output '{check.arg}' is wrong on input set {check.set_index + 1}, size case '{check.case}': "
            f"{check.bad} of {check.numel} elements out of tolerance (max abs error {check.max_abs:.3g}, "
            f"max rel error {check.max_rel:.3g}{nan}{detail}).")


def _first_error(log: str) -> str:
    from .compiler import parse_diagnostics

    errors = [d for d in parse_diagnostics(log) if d.severity == "error"]
    if errors:
        return "; ".join((f"line {d.line}: " if d.line else "") + d.message for d in errors[:3])
    lines = [line for line in log.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no compiler message"
