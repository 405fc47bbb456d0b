"""The backend of PyTorch-reference (KernelBench) problems on a GPU with torch.

A candidate is a KernelBench solution (`class ModelNew`): it is built first in a compile-sandboxed
subprocess (gpu_runner.pytorch_worker.build_solution, cached by source hash), then measured against the
reference in an isolated worker child (pytorch_worker.serve) and judged by kernelbench_verdict. The
reference itself is timed alone, with its CUDA-graph and torch.compile baselines.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ..candidate import Candidate, check_kernelbench_solution
from ..kernelbench_verdict import judge_solution
from ..result import CompileDiagnostic, CompileReport, MeasurementResult, TimingStats
from ..sandbox import Sandbox, SandboxFault
from ..settings import MeasureSettings
from ..spec import Problem, SpecError
from .base import Backend

REFERENCE_BASELINES = ("cuda_graph", "torch_compile")


def kernelbench_check(problem: Problem, candidate: Candidate) -> CompileReport:
    """What can be said without building: the program's shape and its extension sources' includes."""
    from ..kernelbench_verdict import extension_refusal

    started = time.perf_counter()
    try:
        check_kernelbench_solution(problem, candidate)
        refusal = extension_refusal(candidate.source)
    except SpecError as exc:
        refusal = exc.message if hasattr(exc, "message") else str(exc)
    diagnostics = [CompileDiagnostic(line=None, message=refusal)] if refusal else []
    return CompileReport(ok=not refusal, diagnostics=diagnostics, log=refusal or "", facts=None,
                         compile_s=time.perf_counter() - started, compiler="python-ast")


def _stats(timing: dict | None) -> TimingStats | None:
    return TimingStats(**timing) if isinstance(timing, dict) else None


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, *, build_root: str | Path | None = None, host_memory_bytes: int = 64 << 30):
        self.build_root = Path(build_root or os.environ.get("KERNELLAB_TORCH_BUILD_DIR")
                               or Path(tempfile.gettempdir()) / "kl-kernelbench-builds")
        self._sandbox = Sandbox("gpu_runner.pytorch_worker:serve", host_memory_bytes=host_memory_bytes)
        self._hello: dict | None = None

    def check(self, problem: Problem, candidate: Candidate) -> CompileReport:
        return kernelbench_check(problem, candidate)

    def _request(self, job: dict, timeout_s: float) -> dict:
        if not self._sandbox.alive:
            try:
                kind, self._hello = self._sandbox.start()
            except SandboxFault as fault:
                return {"unavailable": f"The torch worker did not start: {fault.reason}"}
        try:
            kind, evidence = self._sandbox.request(("measure", job), timeout_s)
        except SandboxFault as fault:
            return {"runtime_error": f"{fault.kind}: {fault.reason}"}
        return evidence

    def measure(self, problem: Problem, candidate: Candidate, *, seed: int, profile: bool, energy: bool,
                timeout_s: float, settings: MeasureSettings) -> MeasurementResult:
        from ..pytorch_worker import build_dir, build_solution

        started = time.perf_counter()
        base = dict(backend=self.name, seed=seed, problem=problem.name, candidate_name=candidate.name,
                    source_hash=candidate.source_hash, size_case=problem.default_case.name)
        report = kernelbench_check(problem, candidate)
        if not report.ok:
            return MeasurementResult(status="rejected-guard" if "include" in report.log else "failed-compile",
                                     reason=report.log, **base)
        reference_source = problem.reference.source
        if candidate.source == reference_source:
            evidence = self._request({"reference": reference_source, "settings": settings, "seed": seed,
                                      "baselines": REFERENCE_BASELINES}, timeout_s)
            return self._reference_result(evidence, base, started)
        build = build_solution(candidate.source, self.build_root, timeout_s=timeout_s)
        if not build["ok"]:
            evidence = {"refusal": build["log"]} if build.get("refused") else {"build_error": build["log"]}
        else:
            evidence = self._request({"reference": reference_source, "solution": candidate.source, "seed": seed,
                                      "settings": settings, "extensions": build_dir(self.build_root, candidate.source)
                                      / "ext"}, timeout_s)
        if evidence.get("unavailable"):
            return MeasurementResult(status="unavailable", reason=evidence["unavailable"], **base)
        verdict = judge_solution(evidence, settings, source=candidate.source)
        timing = evidence.get("timing") or {}
        result = MeasurementResult(status=verdict.status, reason=" ".join([verdict.reason, *verdict.notes]),
                                   speedup=verdict.speedup if verdict.status == "ok" else None,
                                   reference=_stats(timing.get("reference")), candidate=_stats(timing.get("candidate")),
                                   **base)
        result.phase_s = {"build": round(build["seconds"], 3), **{k: round(v, 4) for k, v in
                                                                  (evidence.get("phase_s") or {}).items()}}
        result.wall_s = time.perf_counter() - started
        return result

    def _reference_result(self, evidence: dict, base: dict, started: float) -> MeasurementResult:
        if evidence.get("memory_refusal"):  # over the per-problem memory cap: nothing was made on the GPU
            return MeasurementResult(status="unavailable", reason=evidence["memory_refusal"], **base)
        if evidence.get("unavailable") or evidence.get("reference_error") or evidence.get("runtime_error"):
            reason = evidence.get("unavailable") or (evidence.get("reference_error") or evidence["runtime_error"])
            return MeasurementResult(status="unavailable", reason=f"The reference failed: {reason.strip()[-300:]}",
                                     **base)
        timing = evidence.get("timing") or {}
        reference = _stats(timing.get("reference"))
        baselines = ", ".join(f"{label.split(':', 1)[1]} {stats['median_ms']:.4f} ms"
                              for label, stats in timing.items() if label.startswith("baseline:"))
        result = MeasurementResult(status="ok", reason=f"The reference program, timed as eager PyTorch"
                                                       f"{f' (baselines: {baselines})' if baselines else ''}.",
                                   speedup=1.0, reference=reference, candidate=reference, **base)
        result.wall_s = time.perf_counter() - started
        return result

    def close(self) -> None:
        self._sandbox.close()
