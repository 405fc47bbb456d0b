"""The high-level API used by the Django Celery task and by the recorder."""
from __future__ import annotations

import glob
import importlib.util
import os
from typing import Callable, Iterable, Sequence

from .backends.base import Backend
from .candidate import Candidate
from .compiler import DEFAULT_ARCH, CompileOutput, compile_cubin
from .result import CompileReport, Hardware, MeasurementResult
from .settings import MeasureSettings
from .spec import Problem

BACKENDS = ("cupy", "pycuda", "static", "replay", "torch")
# A PyTorch-reference problem is measured by the torch backend wherever a CUDA backend was asked for.
GPU_BACKENDS = ("cupy", "pycuda")


def gpu_present() -> bool:
    """An NVIDIA device node and an importable CuPy; checked without creating a CUDA context here."""
    forced = os.environ.get("KERNELLAB_GPU")
    if forced is not None:
        return forced not in ("0", "", "no", "false")
    return bool(glob.glob("/dev/nvidia[0-9]*")) and importlib.util.find_spec("cupy") is not None


def make_backend(name: str, **options) -> Backend:
    if name == "cupy":
        from .backends.cupy import CupyBackend
        return CupyBackend(**options)
    if name == "pycuda":
        from .backends.pycuda import PycudaBackend
        return PycudaBackend(**options)
    if name == "static":
        from .backends.static import StaticBackend
        return StaticBackend(**options)
    if name == "replay":
        from .backends.replay import ReplayBackend
        return ReplayBackend(**options)
    if name == "torch":
        from .backends.torch import TorchBackend
        return TorchBackend(**options)
    raise ValueError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)}, auto)")


class Runner:
    """`Runner(backend="auto")`: GPU present -> cupy; else replay where the problem has records; else static."""

    def __init__(self, backend: str | Backend = "auto", *, settings: MeasureSettings | None = None,
                 records_root: str | None = None, gpu: str | None = None):
        self.settings = settings or MeasureSettings()
        self._records_root = records_root
        self._gpu = gpu
        self._backends: dict[str, Backend] = {}
        if isinstance(backend, Backend):
            self._fixed: str | None = backend.name
            self._backends[backend.name] = backend
        elif backend == "auto":
            self._fixed = "cupy" if gpu_present() else None
        else:
            if backend not in BACKENDS:
                raise ValueError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)}, auto)")
            self._fixed = backend

    def backend_for(self, problem: Problem | None = None) -> Backend:
        name = self._fixed
        if name is None:
            replay = self._get("replay")
            name = "replay" if problem is not None and replay.has_records(problem) else "static"  # type: ignore[attr-defined]
        if name in GPU_BACKENDS and problem is not None and problem.reference.kind == "pytorch":
            name = "torch"
        return self._get(name)

    def _get(self, name: str) -> Backend:
        if name not in self._backends:
            options = {"records_root": self._records_root, "gpu": self._gpu} if name == "replay" else {}
            self._backends[name] = make_backend(name, **options)
        return self._backends[name]

    @property
    def backend_name(self) -> str:
        return self._fixed or "auto"

    def measure(self, problem: Problem, candidate: Candidate, *, seed: int = 0, profile: bool = False,
                energy: bool = False, timeout_s: float = 300.0) -> MeasurementResult:
        backend = self.backend_for(problem)
        if problem.reference.kind == "pytorch" and backend.name == "static":
            return MeasurementResult(status="unavailable", reason="The static backend cannot run a PyTorch "
                                     "reference: a GPU worker with torch, or recorded data, measures it.",
                                     backend="static", seed=seed, problem=problem.name,
                                     candidate_name=candidate.name, source_hash=candidate.source_hash)
        compile = self._launch_compiler(problem, backend)
        if compile is not None:
            refused = self._launch_refusal(problem, candidate, compile, seed, backend.name, backend.hardware(),
                                           sass=False)
            if refused is not None:
                return refused
        return backend.measure(problem, candidate, seed=seed, profile=profile, energy=energy,
                                                 timeout_s=timeout_s, settings=self.settings)

    def measure_many(self, problem: Problem, candidates: Iterable[Candidate], *, seed: int = 0,
                     profile: bool | Callable[[int], bool] = False, energy: bool | Callable[[int], bool] = False,
                     timeout_s: float = 300.0,
                     on_result: Callable[[int, MeasurementResult], None] | None = None) -> list[MeasurementResult]:
        backend = self.backend_for(problem)
        candidates = list(candidates)
        compile = self._launch_compiler(problem, backend) if candidates else None
        if compile is None:
            return backend.measure_many(problem, candidates, seed=seed, profile=profile, energy=energy,
                                        timeout_s=timeout_s, settings=self.settings, on_result=on_result)
        # Every candidate's launch is checked against its ptxas facts before it is measured. The checks
        # compile (the backend's own compile, cached, so its measurement finds the cubin) on all cores at
        # once; the backend measures each stretch of consecutive candidates whose checks have passed so
        # far while the later ones still compile, so the GPU is not kept waiting for the whole batch.
        from concurrent.futures import ThreadPoolExecutor

        results: list[MeasurementResult] = []
        hardware = backend.hardware()    # here, not in the checks' threads: a GPU worker is started once
        pool = ThreadPoolExecutor(max_workers=min(len(candidates), os.cpu_count() or 2),
                                  thread_name_prefix="launch-check")
        try:
            checks = [pool.submit(self._launch_refusal, problem, c, compile, seed, backend.name, hardware,
                                  sass=True)
                      for c in candidates]
            while len(results) < len(candidates):
                index = len(results)
                refused = checks[index].result()
                if refused is not None:
                    results.append(refused)
                    if on_result:
                        on_result(index, refused)
                    continue
                end = index + 1
                while end < len(candidates) and checks[end].done() and checks[end].result() is None:
                    end += 1
                results += backend.measure_many(
                    problem, candidates[index:end], seed=seed,
                    profile=(lambda k, at=index: profile(at + k)) if callable(profile) else profile,
                    energy=(lambda k, at=index: energy(at + k)) if callable(energy) else energy,
                    timeout_s=timeout_s, settings=self.settings,
                    on_result=(lambda k, result, at=index: on_result(at + k, result)) if on_result else None)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return results

    def _launch_compiler(self, problem: Problem, backend: Backend) -> Callable[..., CompileOutput] | None:
        """How the backend compiles a measured kernel (so the launch check's compile is the one its
        measurement finds in the cache), as (source, options, sass=) -> CompileOutput; None where no
        launch check applies: a PyTorch reference (no launch plan), a replay (what the GPU said is
        recorded), a backend that compiles nothing here, or a GPU worker that cannot start (the backend
        says so when it measures)."""
        if problem.reference.kind == "pytorch" or backend.name == "replay":
            return None
        from .backends.gpu import GpuBackend, WorkerUnavailable
        from .backends.static import StaticBackend

        if isinstance(backend, StaticBackend):
            arch = backend.arch
            return lambda source, options, *, sass: compile_cubin(source, options, arch, sass=sass)
        if isinstance(backend, GpuBackend):
            try:
                arch = backend.arch
            except WorkerUnavailable:
                return None
            return lambda source, options, *, sass: backend.compile(source, options, arch, sass=sass)
        return None

    @staticmethod
    def _launch_refusal(problem: Problem, candidate: Candidate, compile: Callable[..., CompileOutput], seed: int,
                        backend_name: str, hardware: Hardware | None, *, sass: bool) -> MeasurementResult | None:
        """A failed-compile result where a step of the candidate's launch plan needs more registers or
        shared memory per block than the H100 and H200 give one block (resources.per_block_limit, from
        ptxas's facts of its compiled kernels), in some size case; None where it fits or cannot be told
        (a plan or source the backend refuses for its own reasons, a compiler missing)."""
        from . import guards
        from .candidate import check_candidate
        from .resources import plan_broken_limit
        from .spec import KernelLaunch

        if not any(isinstance(step, KernelLaunch) for step in candidate.launch):
            return None
        try:
            # a guard's refusal or an invalid plan is the backend's to give, before any compile
            if guards.scan_source(candidate.source) is not None:
                return None
            check_candidate(problem, candidate)
            output = compile(candidate.source, candidate.compile_options, sass=sass)
        except Exception:  # noqa: BLE001 - the backend's own compile says why when it measures
            return None
        if not output.report.ok or output.report.facts is None:
            return None
        broken = plan_broken_limit(output.report.facts, candidate.launch, problem.sizes)
        if broken is None:
            return None
        index, limit = broken
        result = MeasurementResult(
            status="failed-compile",
            reason=f"The candidate compiles, but its launch cannot run: launch[{index}].{limit.part} {limit.sentence}.",
            backend=backend_name, seed=seed, problem=problem.name, candidate_name=candidate.name,
            source_hash=candidate.source_hash, size_case=problem.default_case.name, hardware=hardware)
        result.compiler = output.report.facts
        return result

    def measure_vendor(self, problem: Problem, *, seed: int = 0, energy: bool = False,
                       timeout_s: float = 300.0) -> MeasurementResult:
        backend = self.backend_for(problem)
        if not hasattr(backend, "measure_vendor"):
            from .vendor import vendor_candidate
            candidate = vendor_candidate(problem)
            return MeasurementResult(status="unavailable", reason=f"the {backend.name} backend cannot run vendor "
                                                                  "baselines", backend=backend.name, seed=seed,
                                     problem=problem.name, candidate_name=candidate.name,
                                     source_hash=candidate.source_hash)
        return backend.measure_vendor(problem, seed=seed, timeout_s=timeout_s, settings=self.settings,
                                      energy=energy)

    def check(self, problem: Problem, candidate: Candidate, *, sass: bool = True) -> CompileReport:
        """Compile (no GPU needed; NVRTC or nvcc, as the source calls for): errors with line numbers,
        ptxas facts, and SASS counts unless `sass` is False (cuobjdump costs about 0.45 s of CPU per
        cubin, ten times an NVRTC compile); a KernelBench solution is read with `ast` (it is built only
        on a GPU worker)."""
        if problem.reference.kind == "pytorch":
            from .backends.torch import kernelbench_check
            return kernelbench_check(problem, candidate)
        backend = self._backends.get(self._fixed or "")
        hello = getattr(backend, "_hello", None)
        arch = hello["arch"] if hello else getattr(backend, "arch", DEFAULT_ARCH) if self._fixed == "static" \
            else DEFAULT_ARCH
        return compile_cubin(candidate.source, candidate.compile_options, arch, sass=sass).report

    def check_many(self, problem: Problem, candidates: Sequence[Candidate], *,
                   workers: int | None = None, sass: bool = True) -> list[CompileReport]:
        """`check` of several candidates at once, one compile per core (NVRTC servers or nvcc
        processes, each in the compile sandbox, each answer cached by source, options, arch and the
        engine's release), reports in the given order."""
        candidates = list(candidates)
        if len(candidates) <= 1:
            return [self.check(problem, c, sass=sass) for c in candidates]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(candidates), workers or os.cpu_count() or 2)) as pool:
            return list(pool.map(lambda c: self.check(problem, c, sass=sass), candidates))

    def profile_reference(self, problem: Problem, *, seed: int = 0) -> tuple[dict[str, float], str]:
        """The reference's Nsight Compute counters on this runner's GPU (one ncu start) and "", or {} and why none
        could be read: a PyTorch reference (many kernels, not one), a backend without a device module, ncu
        missing, a GPU worker that cannot start. The recorder stores them in a recording's reference record; the
        app keeps those of an uploaded problem's reference, which no recording holds."""
        from . import recorder
        from .backends.gpu import WorkerUnavailable
        from .candidate import reference_candidate

        if problem.reference.kind == "pytorch":
            return {}, "a PyTorch reference launches many kernels of its own, so its counters are no one kernel's"
        reference = reference_candidate(problem)
        result = MeasurementResult(status="ok", reason="", source_hash=reference.source_hash)
        try:
            recorder.profile_batch(self, problem, [(reference, result)], seed=seed)
        except WorkerUnavailable as exc:
            return {}, str(exc)
        if not result.profiler:
            return {}, result.observer_errors.get("ncu", "the backend has no device module to profile")
        return dict(result.profiler), ""

    def hardware(self, problem: Problem | None = None) -> Hardware | None:
        return self.backend_for(problem).hardware()

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
