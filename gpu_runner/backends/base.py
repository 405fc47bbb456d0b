"""The two interfaces every backend implements.

`Backend` is what the Runner talks to (check, measure, measure_many). `Device` is the thin layer a
GPU backend (cupy, pycuda) offers inside the isolated worker process: memory, modules, launches and
events on one stream. Validation, timing and guards are written once against `Device`.
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

if TYPE_CHECKING:
    from ..candidate import Candidate
    from ..result import CompileReport, Hardware, MeasurementResult
    from ..settings import MeasureSettings
    from ..spec import Problem

# Errors after which a CUDA context is unusable: the worker reports them and exits.
_STICKY = re.compile(r"ILLEGAL_ADDRESS|illegal memory access|LAUNCH_FAILED|unspecified launch failure|"
                     r"MISALIGNED|misaligned address|ILLEGAL_INSTRUCTION|illegal instruction|"
                     r"HARDWARE_STACK_ERROR|hardware stack error|ASSERT|device-side assert|"
                     r"ILLEGAL_STATE|LAUNCH_TIMEOUT|invalid program counter|INVALID_PC|"
                     r"TMA_ERR|exception on the device|CONTEXT_IS_DESTROYED|not permitted when stream is capturing",
                     re.IGNORECASE)
_KINDS = [
    ("illegal-address", re.compile(r"ILLEGAL_ADDRESS|illegal memory access", re.I)),
    ("misaligned-address", re.compile(r"MISALIGNED|misaligned", re.I)),
    ("out-of-memory", re.compile(r"OUT_OF_MEMORY|out of memory|OutOfMemory", re.I)),
    ("too-many-resources", re.compile(r"OUT_OF_RESOURCES|too many resources", re.I)),
    ("invalid-launch", re.compile(r"INVALID_VALUE|invalid argument|INVALID_CONFIGURATION|"
                                  r"invalid configuration", re.I)),
    ("launch-failure", re.compile(r"LAUNCH_FAILED|unspecified launch failure", re.I)),
    ("illegal-instruction", re.compile(r"ILLEGAL_INSTRUCTION|illegal instruction", re.I)),
    ("device-assert", re.compile(r"ASSERT", re.I)),
]


class DeviceError(RuntimeError):
    """A CUDA failure in the worker; `sticky` means the context must be thrown away."""

    def __init__(self, kind: str, message: str, sticky: bool):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.sticky = sticky


class CompileFailed(RuntimeError):
    """A backend's compiler refused the source; the log keeps nothing quoted from other files."""

    def __init__(self, log: str):
        from ..compiler import redact_foreign

        log = redact_foreign(log)
        super().__init__(log)
        self.log = log


def classify_cuda_error(exc: BaseException) -> DeviceError:
    if isinstance(exc, DeviceError):
        return exc
    text = f"{type(exc).__name__}: {exc}"
    kind = next((k for k, pattern in _KINDS if pattern.search(text)), "cuda-error")
    return DeviceError(kind, text.strip(), bool(_STICKY.search(text)))


class Buffer:
    """Device memory owned by a Device; `ptr` is the raw address."""

    def __init__(self, ptr: int, nbytes: int, handle: Any):
        self.ptr = ptr
        self.nbytes = nbytes
        self.handle = handle


class Device(ABC):
    """One GPU, one stream, inside the worker process."""

    name: str = "device"

    @abstractmethod
    def hardware(self) -> "Hardware": ...

    @abstractmethod
    def compile(self, source: str, options: Sequence[str], kernel_names: Sequence[str]) -> Any:
        """Compile with the backend's own compiler; raise CompileFailed with the log."""

    @abstractmethod
    def load_cubin(self, cubin: bytes) -> Any: ...

    @abstractmethod
    def function(self, module: Any, name: str) -> Any: ...

    @abstractmethod
    def set_max_dynamic_shared(self, function: Any, nbytes: int) -> None: ...

    @abstractmethod
    def alloc(self, nbytes: int) -> Buffer: ...

    @abstractmethod
    def free(self, buffer: Buffer) -> None: ...

    @abstractmethod
    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        """Asynchronous on the device's stream."""

    @abstractmethod
    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int,
               params: Sequence[Any]) -> None:
        """Asynchronous on the device's stream; params are numpy scalars (pointers as uint64)."""

    @abstractmethod
    def new_event(self) -> Any: ...

    @abstractmethod
    def record(self, event: Any) -> None: ...

    @abstractmethod
    def event_done(self, event: Any) -> bool: ...

    @abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def copy_to_host(self, ptr: int, nbytes: int) -> bytes: ...

    @abstractmethod
    def copy_from_host(self, ptr: int, data: bytes) -> None: ...

    @abstractmethod
    def mem_info(self) -> tuple[int, int]: ...

    def set_memory_limit(self, nbytes: int) -> None:
        """Cap what this process may allocate on the GPU (the worker's GPU-side memory limit)."""
        self.memory_limit = nbytes

    def vendor_call(self, kind: str, buffers: dict, shapes: dict) -> Callable[[], None]:
        raise NotImplementedError(f"the {self.name} backend has no vendor libraries")


class Backend(ABC):
    """What the Runner measures with."""

    name: str

    @abstractmethod
    def check(self, problem: "Problem", candidate: "Candidate") -> "CompileReport": ...

    @abstractmethod
    def measure(self, problem: "Problem", candidate: "Candidate", *, seed: int, profile: bool,
                energy: bool, timeout_s: float, settings: "MeasureSettings") -> "MeasurementResult": ...

    def measure_many(self, problem: "Problem", candidates: Iterable["Candidate"], *, seed: int,
                     profile: bool | Callable[[int], bool], energy: bool | Callable[[int], bool],
                     timeout_s: float, settings: "MeasureSettings",
                     on_result: Callable[[int, "MeasurementResult"], None] | None = None
                     ) -> list["MeasurementResult"]:
        results = []
        for i, candidate in enumerate(candidates):
            wants_profile = profile(i) if callable(profile) else profile
            wants_energy = energy(i) if callable(energy) else energy
            result = self.measure(problem, candidate, seed=seed, profile=wants_profile, energy=wants_energy,
                                  timeout_s=timeout_s, settings=settings)
            if on_result:
                on_result(i, result)
            results.append(result)
        return results

    def hardware(self) -> "Hardware | None":
        return None

    def close(self) -> None:
        pass
