"""Rules that reject candidates which cheat or cannot be trusted, each with a readable reason.

Kept apart from timing (how to time) and validation (what is correct): validation and timing collect
evidence, and these functions read it. Each returns None when the candidate passes.
"""
from __future__ import annotations

import re
from typing import Mapping

from .directives import find_forbidden_directive
from .evidence import Evidence, OutputCheck
from .result import Hardware
from .spec import Problem, SizeCase

# What a source may not do itself: KernelLab launches a problem's kernels from its launch plan and times them, so
# work a source launches, or waits for, on its own escapes the timer. A scan of text cannot tell host code from
# device code, and neither is allowed: a host launcher in a reference (`saxpy<<<...>>>` in a wrapper) is as much
# outside the plan as dynamic parallelism in a kernel.
_FORBIDDEN = [
    (re.compile(r"<<<"), "launches a kernel itself ('<<<', from a host function or from device code)"),
    (re.compile(r"\bcudaLaunch(Device|Kernel|CooperativeKernel)\w*\b"), "launches work itself ({0})"),
    (re.compile(r"\bcudaGraphLaunch\b"), "launches a CUDA graph itself"),
    (re.compile(r"\bcudaStreamCreate\w*\b"), "creates a stream ({0})"),
    (re.compile(r"\bcudaStreamFireAndForget\b|\bcudaStreamTailLaunch\b"), "uses a device-side launch stream ({0})"),
    (re.compile(r"\bcudaMemcpy\w*Async\b"), "copies memory asynchronously ({0})"),
    (re.compile(r"\bcudaDeviceSynchronize\b"), "synchronises the device itself ({0})"),
    (re.compile(r"\bcudaGetParameterBuffer\w*\b"), "builds device-side launches ({0})"),
]


def find_escaping_work(source: str) -> tuple[int, str] | None:
    """(line, reason) of the first construct that lets work escape the timer or read the host's files, else None."""
    refusal = find_forbidden_directive(source)
    if refusal is not None:
        return refusal.line, refusal.reason
    stripped = _strip_comments(source)
    for pattern, message in _FORBIDDEN:
        match = pattern.search(stripped)
        if match:
            line = stripped.count("\n", 0, match.start()) + 1
            return line, (f"The source {message.format(match.group(0).strip())} at line {line}; KernelLab launches "
                          "the kernels itself, from the problem's launch steps, and work a source launches or waits "
                          "for on its own escapes the timer, so it is not allowed.")
    return None


def scan_source(source: str) -> str | None:
    """Constructs that let work escape the timer or read the host's files are refused outright."""
    found = find_escaping_work(source)
    return found[1] if found is not None else None


def _strip_comments(source: str) -> str:
    def blank(match: re.Match) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, source, flags=re.S)


def modified_input(evidence: Evidence) -> str | None:
    for change in evidence.input_changes:
        if change.by == "candidate":
            return (f"The candidate modifies its input '{change.arg}' (its checksum changed during the run "
                    f"on input set {change.set_index + 1}, size case '{change.case}'); inputs are read-only.")
    return None


def unwritten_output(check: OutputCheck) -> str | None:
    if check.unwritten == 0:
        return None
    where = f"input set {check.set_index + 1}, size case '{check.case}'" if check.set_index >= 0 \
        else f"the last timed run, size case '{check.case}'"
    if check.unwritten >= check.numel:
        return (f"The candidate wrote none of output '{check.arg}' ({check.numel} elements still hold the "
                f"poison pattern on {where}): it returns without computing, or relies on a stale output "
                "buffer.")
    share = 100.0 * (check.numel - check.unwritten) / check.numel
    return (f"The candidate wrote only {share:.1f}% of output '{check.arg}' ({check.unwritten} of "
            f"{check.numel} elements still hold the poison pattern on {where}, first at index "
            f"{check.first_bad}): every output element must be written by the run.")


def memoised(evidence: Evidence) -> str | None:
    if not evidence.memoised:
        return None
    arg, earlier = evidence.memoised[0].split(":")
    return (f"The candidate's output '{arg}' on a later input set equals the reference's output for input "
            f"set {int(earlier) + 1}: it returns results memoised across launches instead of computing "
            "them from the current inputs.")


def stale_after_timing(evidence: Evidence) -> str | None:
    for check in evidence.post_checks:
        if check.passed:
            continue
        reason = unwritten_output(check)
        if reason:
            return reason + " (after the timed runs: the candidate stops computing after some launches)"
        return (f"After the timed runs, output '{check.arg}' differs from the reference on the same inputs "
                f"({check.bad} of {check.numel} elements out of tolerance): the candidate keeps state across "
                "launches (memoised or skipped work), so its timing cannot be trusted.")
    return None


def timer_escape(escape: Mapping[str, float] | None, *, margin_ms: float, ratio: float) -> str | None:
    """Wall time of synchronised runs that neither the events nor launch overhead explain."""
    if not escape:
        return None
    overhead = max(0.0, escape["noop_wall_ms"] - escape["noop_event_ms"])
    unexplained = escape["wall_ms"] - escape["event_ms"] - overhead
    allowed = margin_ms + ratio * escape["event_ms"]
    if unexplained > allowed:
        return (f"Work escapes the timer: a synchronised run takes {escape['wall_ms']:.3f} ms of wall time but "
                f"its CUDA events measure {escape['event_ms']:.3f} ms ({unexplained:.3f} ms unexplained by "
                "launch overhead).")
    return None


# Dense arithmetic per SM per clock by compute-capability major version: (SIMT fp32, fp64,
# fp16/bf16 tensor, tf32 tensor, int8 tensor). Upper bounds for the roofline guard only.
_RATES = {
    7: (128, 64, 1024, 1024, 2048),
    8: (256, 64, 2048, 1024, 4096),
    9: (256, 128, 4096, 2048, 8192),
    10: (256, 128, 8192, 4096, 16384),
}


def peak_flops(hardware: Hardware, dtypes: set[str]) -> float:
    """The fastest rate any unit could apply to arithmetic on these dtypes (FLOP/s)."""
    major = int(str(hardware.compute_capability).split(".")[0] or 9)
    fp32, fp64, half, tf32, int8 = _RATES.get(major, _RATES[max(_RATES)])
    per_clock = 0
    if dtypes & {"float16", "bfloat16"}:
        per_clock = max(per_clock, half)
    if "float32" in dtypes:
        per_clock = max(per_clock, fp32, tf32)
    if "float64" in dtypes:
        per_clock = max(per_clock, fp64)
    if dtypes & {"uint8"}:
        per_clock = max(per_clock, int8)
    if dtypes & {"int32", "int64", "uint32"} or per_clock == 0:
        per_clock = max(per_clock, fp32)
    return per_clock * hardware.sm_count * hardware.sm_clock_mhz * 1e6


def roofline_floor_ms(problem: Problem, case: SizeCase, hardware: Hardware) -> tuple[float, str] | None:
    floors = []
    if problem.roofline.bytes is not None and hardware.memory_bandwidth_gbs > 0:
        moved = float(problem.roofline.bytes.evaluate(case.sizes))
        floors.append((moved / (hardware.memory_bandwidth_gbs * 1e9) * 1e3,
                       f"{moved / 1e6:.1f} MB at {hardware.memory_bandwidth_gbs:.0f} GB/s"))
    if problem.roofline.flops is not None:
        dtypes = {a.dtype for a in problem.args if a.role != "scalar"}
        rate = peak_flops(hardware, dtypes)
        if rate > 0:
            flops = float(problem.roofline.flops.evaluate(case.sizes))
            floors.append((flops / rate * 1e3, f"{flops / 1e9:.2f} GFLOP at {rate / 1e12:.0f} TFLOP/s"))
    return max(floors) if floors else None


def beyond_roofline(problem: Problem, case: SizeCase, candidate_ms: float, hardware: Hardware | None,
                    margin: float) -> str | None:
    if hardware is None:
        return None
    floor = roofline_floor_ms(problem, case, hardware)
    if floor is None:
        return None
    floor_ms, what = floor
    if candidate_ms < margin * floor_ms:
        return (f"The candidate claims {candidate_ms:.4f} ms, below the roofline bound of {floor_ms:.4f} ms "
                f"({what}) by more than the {100 * (1 - margin):.0f}% margin: it cannot have done the "
                "problem's work.")
    return None
