"""gpu_runner: measured truth for KernelLab (a plain library; it never imports Django).

    problem = load_problem("kernellab/problems/vector_add")
    with Runner() as runner:                       # cupy with a GPU, else replay, else static
        result = runner.measure(problem, candidate, seed=1)
"""
from .candidate import Candidate, check_candidate, reference_candidate, source_hash
from .family import enumerate_variants, render_variant, valid_variants, variant_id
from .result import (CompileDiagnostic, CompileReport, CompilerFacts, Energy, Hardware, MeasurementResult,
                     TimingStats)
from .runner import Runner, gpu_present
from .settings import RECORD_SETTINGS, MeasureSettings
from .spec import CudaReference, Problem, PytorchReference, Reference, SpecError, load_problem, parse_problem

__all__ = [
    "Candidate", "CompileDiagnostic", "CompileReport", "CompilerFacts", "CudaReference", "Energy", "Hardware",
    "MeasureSettings", "MeasurementResult", "Problem", "PytorchReference", "RECORD_SETTINGS", "Reference", "Runner", "SpecError",
    "TimingStats", "check_candidate", "enumerate_variants", "gpu_present", "load_problem", "parse_problem",
    "record_family", "reference_candidate", "render_variant", "source_hash", "valid_variants", "variant_id",
]


def record_family(*args, **kwargs):
    from .recorder import record_family as _record_family
    return _record_family(*args, **kwargs)
