"""Stage one: what limits the kernel (memory, compute, latency or launch), from speed-of-light
throughputs and the problem's FLOP and byte counts against the hardware's ceilings.

The bound decides which stage-two experts run (see `analysis.EXPERTS_BY_BOUND`).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import wording
from .note import ExpertNote
from .profile import KernelProfile

NAME = "roofline"
BOUNDS = ("memory", "compute", "latency", "launch", "unknown")

# A unit above 60% of its peak is what limits the kernel; both under 60% means latency limits it
# (Nsight Compute 2025.3, rule SpeedOfLight.py: latency_bound_threshold = 60).
BUSY_PCT = 60.0
# A kernel shorter than this spends a comparable time being launched: a launch costs about 2-5 µs
# of host and GPU latency (NVIDIA, "Getting Started with CUDA Graphs"), so under 10 µs the launch is
# a third or more of the wall time.
LAUNCH_BOUND_S = 10e-6
# Time over the roofline floor (max of bytes / bandwidth and FLOPs / FP32 rate): at 60% of the
# floor or better the kernel is near its ceiling (info); under 25% it is 4x or more off (critical).
NEAR_FLOOR = 0.6
FAR_FROM_FLOOR = 0.25

SOL_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
SOL_MEMORY = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SOL_DRAM = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"


@dataclass(frozen=True)
class Bound:
    kind: str  # one of BOUNDS
    memory_unit: str | None  # "DRAM" or "L1/L2" when memory-bound
    sm_pct: float | None
    memory_pct: float | None
    dram_pct: float | None
    duration_s: float | None
    floor_s: float | None  # roofline floor from the problem's FLOPs and bytes
    note: ExpertNote

    @property
    def roofline_fraction(self) -> float | None:
        """Floor over measured time: 1.0 is on the roofline."""
        if self.floor_s and self.duration_s:
            return self.floor_s / self.duration_s
        return None


def classify(profile: KernelProfile) -> Bound:
    peaks = profile.peaks
    duration = profile.duration_s
    sm = profile.metric(SOL_SM)
    memory = profile.metric(SOL_MEMORY)
    dram = profile.metric(SOL_DRAM)
    evidence: dict = {}
    floor = None
    if profile.flops is not None or profile.bytes is not None:
        t_mem = (profile.bytes or 0.0) / (peaks.memory_gbs * 1e9)
        t_math = (profile.flops or 0.0) / (peaks.fp32_tflops * 1e12)
        floor = max(t_mem, t_math)
        evidence.update(flops=profile.flops, bytes=profile.bytes, floor_s=wording.rounded(floor),
                        peak_memory_gbs=wording.rounded(peaks.memory_gbs),
                        peak_fp32_tflops=wording.rounded(peaks.fp32_tflops),
                        ridge_flop_per_byte=wording.rounded(peaks.ridge_flop_per_byte))
        if profile.flops and profile.bytes:
            evidence["flop_per_byte"] = wording.rounded(profile.flops / profile.bytes)
    if duration is not None:
        evidence["duration_s"] = wording.rounded(duration)
    for key, value in ((SOL_SM, sm), (SOL_MEMORY, memory), (SOL_DRAM, dram)):
        if value is not None:
            evidence[key] = value
    evidence.update(busy_pct_threshold=BUSY_PCT, launch_bound_s=LAUNCH_BOUND_S)

    if duration is not None and duration < LAUNCH_BOUND_S:
        kind = "launch"
    elif sm is not None and memory is not None:
        if sm < BUSY_PCT and memory < BUSY_PCT:
            kind = "latency"
        else:
            kind = "memory" if memory >= sm else "compute"
    elif duration is not None and floor is not None:
        # No profiler: the problem's own counts over the measured time.
        mem_frac = (profile.bytes or 0.0) / duration / (peaks.memory_gbs * 1e9) * 100
        math_frac = (profile.flops or 0.0) / duration / (peaks.fp32_tflops * 1e12) * 100
        sm, memory = math_frac, mem_frac
        evidence.update(achieved_memory_pct_of_peak=wording.rounded(mem_frac),
                        achieved_fp32_pct_of_peak=wording.rounded(math_frac))
        if mem_frac < BUSY_PCT and math_frac < BUSY_PCT:
            kind = "latency"
        else:
            kind = "memory" if mem_frac >= math_frac else "compute"
    else:
        kind = "unknown"
    unit = None
    if kind == "memory" and memory is not None:
        unit = "DRAM" if dram is None or dram >= memory - 10 else "L1/L2"
        evidence["memory_unit"] = unit
    evidence["bound"] = kind
    note = _note(kind, unit, sm, memory, dram, duration, floor, profile, evidence)
    first = ("bound", "memory_unit", "duration_s", SOL_SM, SOL_MEMORY, SOL_DRAM, "roofline_fraction", "flop_per_byte")
    ordered = {k: note.evidence[k] for k in first if k in note.evidence}
    ordered.update((k, v) for k, v in note.evidence.items() if k not in ordered)
    note = ExpertNote(note.expert, note.severity, note.finding, ordered, note.advice)
    return Bound(kind, unit, sm, memory, dram, duration, floor, note)


def _note(kind, unit, sm, memory, dram, duration, floor, profile, evidence) -> ExpertNote:
    fraction = floor / duration if floor and duration else None
    if fraction is not None:
        evidence["roofline_fraction"] = wording.rounded(fraction)
        evidence.update(near_floor=NEAR_FLOOR, far_from_floor=FAR_FROM_FLOOR)
    sol = ""
    if sm is not None and memory is not None:
        sol = f"SM at {wording.percent(sm)} of peak, memory units at {wording.percent(memory)}"
        if dram is not None:
            sol += f", DRAM at {wording.percent(dram)}"
    where = {
        "memory": f"Memory-bound ({unit or 'memory'})",
        "compute": "Compute-bound",
        "latency": "Latency-bound (no unit above 60% of peak)",
        "launch": f"Launch-bound ({wording.seconds(duration)} per launch)" if duration else "Launch-bound",
        "unknown": "Unclassified (no timing or profile)",
    }[kind]
    gap = ""
    if fraction is not None:
        gap = (f"{wording.seconds(duration)} against a roofline floor of {wording.seconds(floor)} "
               f"({wording.percent(100 * fraction)} of the ceiling)")
    finding = where + (": " + "; ".join(p for p in (sol, gap) if p) if sol or gap else "") + "."
    if fraction is None or kind == "launch":
        severity = "info"
    elif fraction >= NEAR_FLOOR:
        severity = "info"
    elif fraction >= FAR_FROM_FLOOR:
        severity = "warning"
    else:
        severity = "critical"
    if fraction is not None and fraction > 1.0:
        advice = ("The kernel beats the DRAM floor, so its data is served from cache; time it at a size several "
                  "times the L2 before optimising further.")
    elif fraction is not None and fraction >= NEAR_FLOOR:
        advice = ("Little is left to gain at this algorithm; only moving fewer bytes (fusion, lower precision) or "
                  "fewer FLOPs moves the floor itself.")
    else:
        advice = {
            "memory": ("Cut the bytes that cross the busiest memory level: coalesce and vectorise accesses, reuse data "
                       "from shared memory or registers, and read each input once."),
            "compute": ("Cut or cheapen the instructions on the busiest pipe: fewer index computations per FLOP, fused "
                        "multiply-adds, tensor cores where the data type allows."),
            "latency": ("Keep more independent work in flight: more loads per thread before their first use, more "
                        "resident warps, fewer barriers; the occupancy and stall notes say which."),
            "launch": ("Give each launch more work (fuse with the neighbouring kernels or batch the calls) or replay "
                       "the launch sequence from a CUDA graph."),
            "unknown": "Measure the kernel with the profiler so that the experts can say what limits it.",
        }[kind]
    return ExpertNote(NAME, severity, finding, evidence, advice)
