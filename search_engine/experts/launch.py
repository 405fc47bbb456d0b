"""Launch overhead: a kernel so short that launching it costs as much as running it."""

from __future__ import annotations

from . import wording
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import LAUNCH_BOUND_S, Bound

NAME = "launch"

# Under 5 µs the kernel runs about as long as one launch costs (2-5 µs; NVIDIA, "Getting Started with
# CUDA Graphs"): critical. Under LAUNCH_BOUND_S (10 µs) a warning.
LAUNCH_CRITICAL_S = 5e-6


def examine(profile: KernelProfile, bound: Bound) -> list[ExpertNote]:
    duration = profile.duration_s
    if duration is None or duration >= LAUNCH_BOUND_S:
        return []
    gpu_ns = profile.metric("gpu__time_duration.sum")
    grid = profile.metric("launch__grid_size")
    sms = profile.metric("launch__sm_count", "device__attribute_multiprocessor_count")
    evidence = {"duration_s": wording.rounded(duration), "gpu__time_duration.sum": gpu_ns,
                "launch__grid_size": grid, "launch__block_size": profile.metric("launch__block_size"),
                "launch__sm_count": sms, "launch_bound_s": LAUNCH_BOUND_S, "launch_critical_s": LAUNCH_CRITICAL_S}
    if bound.floor_s is not None:
        evidence["floor_s"] = wording.rounded(bound.floor_s)
    work = f" for {wording.size(profile.bytes)} of data" if profile.bytes else ""
    on_gpu = f" ({wording.seconds(gpu_ns * 1e-9)} of it on the GPU by Nsight Compute)" if gpu_ns else ""
    spread = (f"; its {grid:.0f} blocks cover at most {min(grid, sms):.0f} of {sms:.0f} SMs" if grid and sms and
              grid < sms else "")
    finding = (f"The kernel runs {wording.seconds(duration)}{on_gpu}{work}, about what a launch costs"
               f"{spread}.")
    advice = ("Give each launch more work: fuse this kernel into its producer or consumer, batch several problems "
              "into one grid, and replay fixed launch sequences from a CUDA graph.")
    severity = "critical" if duration < LAUNCH_CRITICAL_S else "warning"
    return [ExpertNote(NAME, severity, finding, evidence, advice)]
