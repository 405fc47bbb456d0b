"""The parent side of the GPU backends: one isolated worker per backend, compiles on the CPU cores.

Every measured kernel, the reference included, is compiled here by nvcc to a cubin (`compile`, the
one compile path: cached, sandboxed) and the worker only loads it, whichever backend it is; NVRTC
and pycuda's SourceModule are left to callers that send no cubin. `measure` compiles one candidate
and times it; `measure_many` compiles every candidate in a pool of threads (one nvcc process each,
on all cores) and times them one after another in the worker as they become ready.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

from .. import guards
from ..candidate import Candidate, check_candidate
from ..compiler import CompileOutput, ToolMissing, compile_cubin
from ..evidence import Evidence
from ..result import CompileReport, Hardware, MeasurementResult
from ..sandbox import Sandbox, SandboxFault
from ..settings import MeasureSettings
from ..spec import CudaReference, Problem, SpecError
from ..verdict import judge
from .base import Backend


class WorkerUnavailable(RuntimeError):
    pass


class GpuBackend(Backend):
    device_module = ""
    compiles_in_worker = True

    def __init__(self, *, compile_workers: int | None = None, host_memory_bytes: int | None = None,
                 gpu_memory_fraction: float = 0.8, start_timeout_s: float = 300.0):
        self._sandbox: Sandbox | None = None
        self._hello: dict | None = None
        self._host_memory = host_memory_bytes or MeasureSettings().host_memory_bytes
        self._gpu_fraction = gpu_memory_fraction
        self._start_timeout = start_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=compile_workers or os.cpu_count() or 4,
                                        thread_name_prefix="nvcc")
        self.worker_starts = 0

    # --- the worker -------------------------------------------------------------------------
    def _worker(self) -> Sandbox:
        if self._sandbox is not None and self._sandbox.alive:
            return self._sandbox
        if self._sandbox is None:
            self._sandbox = Sandbox("gpu_runner.worker:serve", [self.device_module, str(self._gpu_fraction)],
                                    host_memory_bytes=self._host_memory)
        try:
            kind, payload = self._sandbox.start(self._start_timeout)
        except SandboxFault as exc:
            raise WorkerUnavailable(f"the {self.name} worker did not start: {exc.reason}") from None
        if kind != "hello":
            self._sandbox.kill()
            raise WorkerUnavailable(f"the {self.name} worker could not use the GPU: {payload}")
        self._hello = payload
        self.worker_starts += 1
        return self._sandbox

    def hardware(self) -> Hardware | None:
        try:
            self._worker()
        except WorkerUnavailable:
            return None
        return self._hello["hardware"] if self._hello else None

    @property
    def arch(self) -> str:
        self._worker()
        return self._hello["arch"]  # type: ignore[index]

    def _request(self, job: dict, timeout_s: float) -> Evidence:
        sandbox = self._worker()
        try:
            kind, evidence = sandbox.request(("job", job), timeout_s)
        except SandboxFault as fault:
            evidence = Evidence(hardware=self._hello["hardware"] if self._hello else None)
            evidence.error_kind = {"timeout": "timeout", "host-memory": "host-memory"}.get(fault.kind, "crash")
            evidence.error_message = fault.reason
            evidence.phase = "the worker"
            return evidence
        if evidence.sticky:
            sandbox.kill()   # it exits by itself; make sure before the next job
        return evidence

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- Backend ------------------------------------------------------------------------------
    def check(self, problem: Problem, candidate: Candidate) -> CompileReport:
        return compile_cubin(candidate.source, candidate.compile_options, self.arch).report

    def _precheck(self, problem: Problem, candidate: Candidate, seed: int) -> MeasurementResult | None:
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
        return None

    def compile(self, source: str, options, arch: str, *, sass: bool = True) -> CompileOutput:
        """The one compile path: NVRTC or nvcc to a cubin, cached by source, options, arch and the
        engine's release, in the compile sandbox. The app's verifications, the recorder and the
        search's compile checks all come here, so the same variant is the same cubin wherever it is
        measured."""
        return compile_cubin(source, options, arch, sass=sass)

    def _compile_then_count(self, source: str, options, arch: str) -> tuple[CompileOutput, Future | None]:
        """The cubin now (a compile check has usually cached it) and its SASS counts in the
        background, so cuobjdump runs while the worker times the kernel instead of before it."""
        output = self.compile(source, options, arch, sass=False)
        if not output.report.ok:
            return output, None
        return output, self._pool.submit(self.compile, source, options, arch, sass=True)

    @staticmethod
    def _counted(output: CompileOutput, counting: Future | None, phases: dict) -> CompileOutput:
        if counting is None:
            return output
        waited = time.perf_counter()
        try:
            counted = counting.result()
        except ToolMissing:
            return output
        phases["sass_wait"] = round(time.perf_counter() - waited, 4)
        return counted if counted.report.ok and counted.cubin == output.cubin else output

    def _reference_cubin(self, problem: Problem, arch: str) -> bytes | None:
        reference = problem.reference
        if not isinstance(reference, CudaReference):
            return None
        try:
            return self.compile(reference.source, reference.compile_options, arch).cubin
        except ToolMissing:
            return None  # the worker compiles it with the backend's own compiler instead

    def measure(self, problem: Problem, candidate: Candidate, *, seed: int, profile: bool, energy: bool,
                timeout_s: float, settings: MeasureSettings) -> MeasurementResult:
        started = time.perf_counter()
        early = self._precheck(problem, candidate, seed)
        if early:
            return early
        try:
            arch = self.arch
        except WorkerUnavailable as exc:
            return self._unavailable(problem, candidate, seed, str(exc))
        try:
            output, counting = self._compile_then_count(candidate.source, candidate.compile_options, arch)
        except ToolMissing as exc:
            return self._unavailable(problem, candidate, seed, f"the compiler of measured kernels: {exc}")
        compiled = time.perf_counter()
        if not output.report.ok:
            result = self._compile_failed(problem, candidate, seed, output.report)
            result.wall_s = time.perf_counter() - started
            return result
        job = {"kind": "measure", "problem": problem, "candidate": candidate, "cubin": output.cubin, "seed": seed,
               "settings": settings, "energy": energy, "reference_cubin": self._reference_cubin(problem, arch)}
        evidence = self._request(job, timeout_s)
        phases = {"compile": round(compiled - started, 4), "worker_round_trip": round(time.perf_counter() - compiled, 4)}
        output = self._counted(output, counting, phases)
        result = self._finish(problem, candidate, evidence, seed, settings, output, profile, output.cubin, arch)
        result.phase_s.update(phases)
        result.wall_s = time.perf_counter() - started
        return result

    def measure_many(self, problem: Problem, candidates: Iterable[Candidate], *, seed: int,
                     profile: bool | Callable[[int], bool], energy: bool | Callable[[int], bool],
                     timeout_s: float, settings: MeasureSettings,
                     on_result: Callable[[int, MeasurementResult], None] | None = None
                     ) -> list[MeasurementResult]:
        candidates = list(candidates)
        try:
            arch = self.arch
        except WorkerUnavailable as exc:
            results = [self._unavailable(problem, c, seed, str(exc)) for c in candidates]
            for i, r in enumerate(results):
                if on_result:
                    on_result(i, r)
            return results
        futures = [self._pool.submit(self.compile, c.source, c.compile_options, arch) for c in candidates]
        reference_cubin = self._reference_cubin(problem, arch)
        results = []
        for i, (candidate, future) in enumerate(zip(candidates, futures)):
            started = time.perf_counter()
            result = self._precheck(problem, candidate, seed)
            if result is None:
                output: CompileOutput = future.result()
                if not output.report.ok:
                    result = self._compile_failed(problem, candidate, seed, output.report)
                else:
                    job = {"kind": "measure", "problem": problem, "candidate": candidate, "cubin": output.cubin,
                           "seed": seed, "settings": settings, "reference_cubin": reference_cubin,
                           "energy": energy(i) if callable(energy) else energy}
                    evidence = self._request(job, timeout_s)
                    wants_profile = profile(i) if callable(profile) else profile
                    result = self._finish(problem, candidate, evidence, seed, settings, output, wants_profile,
                                          output.cubin, arch)
            result.wall_s = time.perf_counter() - started
            if on_result:
                on_result(i, result)
            results.append(result)
        return results

    def measure_vendor(self, problem: Problem, *, seed: int, timeout_s: float, settings: MeasureSettings,
                       energy: bool = False) -> MeasurementResult:
        """Time the problem's vendor baseline ([vendor] kind) against the reference."""
        from ..vendor import vendor_candidate

        candidate = vendor_candidate(problem)
        started = time.perf_counter()
        try:
            arch = self.arch
        except WorkerUnavailable as exc:
            return self._unavailable(problem, candidate, seed, str(exc))
        job = {"kind": "vendor", "problem": problem, "candidate": candidate, "seed": seed, "settings": settings,
               "energy": energy, "reference_cubin": self._reference_cubin(problem, arch)}
        evidence = self._request(job, timeout_s)
        result = self._finish(problem, candidate, evidence, seed, settings, None, False, None)
        result.wall_s = time.perf_counter() - started
        return result

    # --- assembling results -------------------------------------------------------------------
    def _finish(self, problem: Problem, candidate: Candidate, evidence: Evidence, seed: int,
                settings: MeasureSettings, output: CompileOutput | None, profile: bool,
                cubin: bytes | None, arch: str | None = None) -> MeasurementResult:
        result = judge(problem, evidence, settings, backend=self.name, seed=seed)
        result.candidate_name = candidate.name
        result.source_hash = candidate.source_hash
        if output is not None and output.report.facts is not None:
            result.compiler = output.report.facts
            result.compiler.compiled_with = {"compiler": output.report.compiler, "arch": arch or "",
                                             "options": list(candidate.compile_options)}
        elif output is not None and not output.report.ok and result.status != "failed-compile":
            result.observer_errors["ptxas"] = "nvcc: " + output.report.summary()
        if profile and result.status == "ok":
            from ..observers.ncu import NcuObserver, ObserverUnavailable

            try:
                result.profiler = NcuObserver().profile(problem, candidate, cubin, self.device_module, seed=seed)
            except ObserverUnavailable as exc:
                result.observer_errors["ncu"] = str(exc)
        return result

    def _compile_failed(self, problem: Problem, candidate: Candidate, seed: int,
                        report: CompileReport) -> MeasurementResult:
        return MeasurementResult(status="failed-compile", reason="The candidate " + report.summary() + ".",
                                 backend=self.name, seed=seed, problem=problem.name, candidate_name=candidate.name,
                                 source_hash=candidate.source_hash, size_case=problem.default_case.name,
                                 hardware=self._hello["hardware"] if self._hello else None)

    def _unavailable(self, problem: Problem, candidate: Candidate, seed: int, reason: str) -> MeasurementResult:
        return MeasurementResult(status="unavailable", reason=reason, backend=self.name, seed=seed,
                                 problem=problem.name, candidate_name=candidate.name,
                                 source_hash=candidate.source_hash, size_case=problem.default_case.name)
