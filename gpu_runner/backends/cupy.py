"""CuPy backend: NVRTC through RawModule (or a cubin compiled by nvcc), launches on one stream."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any, Sequence

import numpy as np

from ..candidate import arch_option, needs_nvcc, nvrtc_options
from ..compiler import compile_cubin, cutlass_flags, include_flags
from ..hardware import describe
from ..result import Hardware
from .base import Buffer, CompileFailed, Device
from .gpu import GpuBackend


class CupyDevice(Device):
    name = "cupy"
    _NOT_READY = 600   # cudaErrorNotReady

    def __init__(self, device_index: int = 0):
        import cupy

        self.cp = cupy
        self.device_index = device_index
        cupy.cuda.Device(device_index).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.stream.use()
        self.pool = cupy.get_default_memory_pool()
        self.runtime = cupy.cuda.runtime
        self._tmp = tempfile.mkdtemp(prefix="kl-cubin-")
        self._loaded = 0
        atexit.register(shutil.rmtree, self._tmp, True)

    def hardware(self) -> Hardware:
        props = self.runtime.getDeviceProperties(self.device_index)
        props = dict(props)
        if not props.get("clockRate"):
            try:
                props["clockRate"] = self.runtime.deviceGetAttribute(self.runtime.cudaDevAttrClockRate,
                                                                     self.device_index)
            except Exception:  # noqa: BLE001 - the attribute is gone in newer CUDA; NVML fills it
                pass
        return describe(props, device_index=self.device_index,
                        driver_fallback=str(self.runtime.driverGetVersion()))

    def compile(self, source: str, options: Sequence[str], kernel_names: Sequence[str]) -> Any:
        from cupy.cuda.compiler import CompileException

        if arch_option(list(options)) or needs_nvcc(list(options)):
            # RawModule picks the device's architecture itself and compiles with NVRTC: an sm_90a build, or options
            # only nvcc has (--extended-lambda), go through compile_cubin.
            output = compile_cubin(source, options, sass=False)
            if output.cubin is None:
                raise CompileFailed(output.report.log)
            return self.load_cubin(output.cubin)
        flags = tuple(nvrtc_options(options)) + ("--std=c++17", *cutlass_flags(source), *include_flags())
        module = self.cp.RawModule(code=source, options=flags, backend="nvrtc")
        try:
            module.compile()
        except CompileException as exc:
            raise CompileFailed(exc.get_message() if hasattr(exc, "get_message") else str(exc)) from None
        return module

    def load_cubin(self, cubin: bytes) -> Any:
        # RawModule loads lazily from the path, so the file stays until the worker exits.
        self._loaded += 1
        path = os.path.join(self._tmp, f"m{self._loaded}.cubin")
        with open(path, "wb") as handle:
            handle.write(cubin)
        module = self.cp.RawModule(path=path)
        return module

    def function(self, module: Any, name: str) -> Any:
        return module.get_function(name)

    def kernel_attributes(self, function: Any) -> dict[str, int]:
        return {"registers": int(function.num_regs), "static_shared_bytes": int(function.shared_size_bytes),
                "local_bytes": int(function.local_size_bytes),
                "max_threads_per_block": int(function.max_threads_per_block)}

    def set_max_dynamic_shared(self, function: Any, nbytes: int) -> None:
        function.max_dynamic_shared_size_bytes = int(nbytes)

    def alloc(self, nbytes: int) -> Buffer:
        memory = self.cp.cuda.alloc(int(nbytes))
        return Buffer(int(memory.ptr), int(nbytes), memory)

    def free(self, buffer: Buffer) -> None:
        buffer.handle = None

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        self.runtime.memsetAsync(ptr, int(byte), int(nbytes), self.stream.ptr)

    def launch(self, function: Any, grid, block, shared: int, params: Sequence[Any]) -> None:
        function(tuple(grid), tuple(block), tuple(params), shared_mem=int(shared))

    def new_event(self) -> Any:
        return self.cp.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def event_done(self, event: Any) -> bool:
        # Event.done hides errors (any status but success reads as "not done"): query and raise instead.
        status = self.runtime.eventQuery(event.ptr)
        if status == 0:
            return True
        if status == self._NOT_READY:
            return False
        raise self.runtime.CUDARuntimeError(status)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self.cp.cuda.get_elapsed_time(start, end))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def copy_to_host(self, ptr: int, nbytes: int) -> bytes:
        self.stream.synchronize()
        host = np.empty(int(nbytes), dtype=np.uint8)
        self.runtime.memcpy(host.ctypes.data, ptr, int(nbytes), self.runtime.memcpyDeviceToHost)
        return host.tobytes()

    def copy_from_host(self, ptr: int, data: bytes) -> None:
        self.stream.synchronize()
        host = np.frombuffer(bytes(data), dtype=np.uint8)
        self.runtime.memcpy(ptr, host.ctypes.data, len(data), self.runtime.memcpyHostToDevice)

    def mem_info(self) -> tuple[int, int]:
        free, total = self.runtime.memGetInfo()
        return int(free), int(total)

    def set_memory_limit(self, nbytes: int) -> None:
        self.memory_limit = nbytes
        self.pool.set_limit(size=int(nbytes))

    def array(self, buffer: Buffer, shape: tuple[int, ...], dtype: str) -> Any:
        """A CuPy array over a buffer (for the vendor adapters)."""
        memory = self.cp.cuda.UnownedMemory(buffer.ptr, buffer.nbytes, buffer.handle)
        pointer = self.cp.cuda.MemoryPointer(memory, 0)
        return self.cp.ndarray(shape, dtype=dtype, memptr=pointer)


def make_device() -> CupyDevice:
    return CupyDevice(int(os.environ.get("KERNELLAB_GPU_INDEX", "0")))


class CupyBackend(GpuBackend):
    name = "cupy"
    device_module = "gpu_runner.backends.cupy"
    compiles_in_worker = True
