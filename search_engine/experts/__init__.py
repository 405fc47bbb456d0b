"""Micro-profiling experts: Nsight Compute, ptxas and SASS numbers of a measured kernel turned into
short findings with advice (KernelPro), plus the time/energy objective of a run.

    notes = analyse(measurement, flops=..., bytes=..., hardware=...)
    text = notes_for_prompt(notes)          # or raw_metrics_for_prompt(measurement)

Stage one (`roofline`) classifies the kernel as memory-, compute-, latency- or launch-bound; that
bound picks the stage-two experts (`analysis.EXPERTS_BY_BOUND`). Each expert is one module with its
thresholds as named constants beside the reason or source for each.
"""

from .analysis import EXPERTS_BY_BOUND, analyse, bound_of
from .note import SEVERITIES, ExpertNote
from .objective import OBJECTIVES, objective_value, pareto_front
from .profile import KernelProfile, Peaks
from .prompt import notes_for_prompt, raw_metrics_for_prompt
from .roofline import Bound

__all__ = [
    "EXPERTS_BY_BOUND", "OBJECTIVES", "SEVERITIES", "Bound", "ExpertNote", "KernelProfile", "Peaks", "analyse",
    "bound_of", "notes_for_prompt", "objective_value", "pareto_front", "raw_metrics_for_prompt",
]
