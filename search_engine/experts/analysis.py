"""The single entry point: stage one classifies the bound, stage two runs the experts it calls for."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from . import caches, energy, launch, memory_access, occupancy, shared_memory, spills, tensor_cores, warps
from .note import ExpertNote
from .profile import KernelProfile
from .roofline import Bound, classify

Expert = Callable[[KernelProfile, Bound], list[ExpertNote]]

# Which experts run for which bound. A launch-bound kernel's other costs hide behind its launch;
# tensor cores matter once a kernel can be compute-bound (the expert also checks the problem's
# FLOP/byte ratio); divergence and stall reasons matter when the SM, not memory, sets the pace.
EXPERTS_BY_BOUND: dict[str, tuple[Expert, ...]] = {
    "memory": (memory_access.examine, caches.examine, shared_memory.examine, spills.examine,
               occupancy.examine, tensor_cores.examine, energy.examine),
    "compute": (tensor_cores.examine, shared_memory.examine, warps.examine, spills.examine,
                occupancy.examine, memory_access.examine, energy.examine),
    "latency": (memory_access.examine, caches.examine, occupancy.examine, warps.examine,
                shared_memory.examine, spills.examine, tensor_cores.examine, energy.examine),
    "launch": (launch.examine, spills.examine, energy.examine),
    "unknown": (memory_access.examine, caches.examine, shared_memory.examine, spills.examine,
                occupancy.examine, warps.examine, tensor_cores.examine, launch.examine, energy.examine),
}


def analyse(measurement: Mapping[str, Any], *, flops: float | None, bytes: float | None,
            hardware: Mapping[str, Any] | None) -> list[ExpertNote]:
    """Expert notes for one measured kernel (a MeasurementResult dict), the roofline note first,
    then the others from critical to info. `flops` and `bytes` are the problem's roofline formulas
    evaluated at the measured size; `hardware` defaults to the measurement's own hardware dict.
    A measurement that did not run correctly gets no notes."""
    if measurement.get("status", "ok") != "ok":
        return []
    profile = KernelProfile.from_measurement(measurement, flops=flops, bytes=bytes, hardware=hardware)
    bound = classify(profile)
    notes: list[ExpertNote] = []
    for expert in EXPERTS_BY_BOUND[bound.kind]:
        notes.extend(expert(profile, bound))
    notes.sort(key=lambda n: -n.rank)
    return [bound.note, *notes]


def bound_of(measurement: Mapping[str, Any], *, flops: float | None, bytes: float | None,
             hardware: Mapping[str, Any] | None) -> Bound:
    """Stage one alone."""
    return classify(KernelProfile.from_measurement(measurement, flops=flops, bytes=bytes, hardware=hardware))
