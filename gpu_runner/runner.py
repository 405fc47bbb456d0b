"""The high-level API used by the Django Celery task and by the recorder."""
from __future__ import annotations

import glob
import importlib.util
import os
from typing import Callable, Iterable, Sequence

from .backends.base import Backend
from .candidate import Candidate
from .compiler import DEFAULT_ARCH, compile_cubin
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
        return backend.measure(problem, candidate, seed=seed, profile=profile, energy=energy,
                                                 timeout_s=timeout_s, settings=self.settings)

    def measure_many(self, problem: Problem, candidates: Iterable[Candidate], *, seed: int = 0,
                     profile: bool | Callable[[int], bool] = False, energy: bool | Callable[[int], bool] = False,
                     timeout_s: float = 300.0,
                     on_result: Callable[[int, MeasurementResult], None] | None = None) -> list[MeasurementResult]:
        return self.backend_for(problem).measure_many(problem, candidates, seed=seed, profile=profile, energy=energy,
                                                      timeout_s=timeout_s, settings=self.settings,
                                                      on_result=on_result)

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
