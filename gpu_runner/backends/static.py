"""Static backend: nvcc without a GPU. It compiles and reads compiler facts; it cannot time."""
from __future__ import annotations

import time

from .. import guards
from ..candidate import Candidate, check_candidate
from ..compiler import DEFAULT_ARCH, compile_cubin
from ..result import CompileReport, MeasurementResult
from ..settings import MeasureSettings
from ..spec import Problem, SpecError
from .base import Backend


class StaticBackend(Backend):
    name = "static"

    def __init__(self, arch: str = DEFAULT_ARCH):
        self.arch = arch

    def check(self, problem: Problem, candidate: Candidate) -> CompileReport:
        return compile_cubin(candidate.source, candidate.compile_options, self.arch).report

    def measure(self, problem: Problem, candidate: Candidate, *, seed: int, profile: bool, energy: bool,
                timeout_s: float, settings: MeasureSettings) -> MeasurementResult:
        started = time.perf_counter()
        base = dict(backend=self.name, seed=seed, problem=problem.name, candidate_name=candidate.name,
                    source_hash=candidate.source_hash, size_case=problem.default_case.name)
        reason = guards.scan_source(candidate.source)
        if reason:
            return MeasurementResult(status="rejected-guard", reason=reason, **base)
        try:
            check_candidate(problem, candidate)
        except SpecError as exc:
            return MeasurementResult(status="failed-compile", reason=f"The candidate's launch plan is invalid: {exc}",
                                     **base)
        output = compile_cubin(candidate.source, candidate.compile_options, self.arch)
        if not output.report.ok:
            result = MeasurementResult(status="failed-compile", reason="The candidate " + output.report.summary() + ".",
                                       **base)
        else:
            from ..compiler import cubin_kernel_names

            missing = [k for k in candidate.kernel_names if k not in cubin_kernel_names(output.cubin or b"")]
            if missing:
                result = MeasurementResult(
                    status="failed-compile", reason=f"The kernel '{missing[0]}' is not in the compiled module; "
                                                    "declare it extern \"C\" __global__.", **base)
            else:
                result = MeasurementResult(status="unavailable", reason=f"No GPU here: the static backend compiled "
                                                                        f"the candidate for {self.arch} but cannot "
                                                                        "run or time it.", **base)
        result.compiler = output.report.facts
        result.wall_s = time.perf_counter() - started
        return result
