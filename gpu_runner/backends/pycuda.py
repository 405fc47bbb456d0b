"""PyCUDA backend: nvcc through SourceModule (or a cubin), launches on one stream."""
from __future__ import annotations

import atexit
import os
from typing import Any, Sequence

import numpy as np

from ..candidate import arch_option, nvcc_options
from ..compiler import cutlass_flags
from ..directives import allowed_include_dirs
from ..hardware import describe
from ..result import Hardware
from .base import Buffer, CompileFailed, Device
from .gpu import GpuBackend


class PycudaDevice(Device):
    name = "pycuda"

    def __init__(self, device_index: int = 0):
        import pycuda.driver as cuda

        self.cuda = cuda
        cuda.init()
        self.dev = cuda.Device(device_index)
        self.device_index = device_index
        self.context = self.dev.retain_primary_context()
        self.context.push()
        atexit.register(self.context.pop)
        self.stream = cuda.Stream()
        self.memory_limit = 0
        self.allocated = 0

    def hardware(self) -> Hardware:
        attrs = self.dev.get_attributes()
        a = self.cuda.device_attribute
        cc = self.dev.compute_capability()
        props = {"name": self.dev.name(), "multiProcessorCount": attrs.get(a.MULTIPROCESSOR_COUNT, 0),
                 "totalGlobalMem": self.dev.total_memory(), "clockRate": attrs.get(a.CLOCK_RATE, 0),
                 "memoryClockRate": attrs.get(a.MEMORY_CLOCK_RATE, 0),
                 "memoryBusWidth": attrs.get(a.GLOBAL_MEMORY_BUS_WIDTH, 0),
                 "l2CacheSize": attrs.get(a.L2_CACHE_SIZE, 0), "major": cc[0], "minor": cc[1]}
        return describe(props, device_index=self.device_index,
                        driver_fallback=str(self.cuda.get_driver_version()))

    def compile(self, source: str, options: Sequence[str], kernel_names: Sequence[str]) -> Any:
        from pycuda.compiler import SourceModule

        major, minor = self.dev.compute_capability()
        try:
            return SourceModule(source, options=nvcc_options(options) + ["-std=c++17", *cutlass_flags(source)],
                                no_extern_c=True, arch=arch_option(list(options)) or f"sm_{major}{minor}",
                                include_dirs=[str(d) for d in allowed_include_dirs()])
        except self.cuda.CompileError as exc:
            raise CompileFailed(f"{exc.stderr or ''}\n{exc.stdout or ''}\n{exc}") from None

    def load_cubin(self, cubin: bytes) -> Any:
        return self.cuda.module_from_buffer(cubin)

    def function(self, module: Any, name: str) -> Any:
        return module.get_function(name)

    def kernel_attributes(self, function: Any) -> dict[str, int]:
        fa = self.cuda.function_attribute
        return {"registers": int(function.get_attribute(fa.NUM_REGS)),
                "static_shared_bytes": int(function.get_attribute(fa.SHARED_SIZE_BYTES)),
                "local_bytes": int(function.get_attribute(fa.LOCAL_SIZE_BYTES)),
                "max_threads_per_block": int(function.get_attribute(fa.MAX_THREADS_PER_BLOCK))}

    def set_max_dynamic_shared(self, function: Any, nbytes: int) -> None:
        function.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))

    def alloc(self, nbytes: int) -> Buffer:
        if self.memory_limit and self.allocated + nbytes > self.memory_limit:
            raise MemoryError(f"out of memory: the worker's GPU allocation limit is {self.memory_limit} bytes")
        allocation = self.cuda.mem_alloc(int(nbytes))
        self.allocated += int(nbytes)
        return Buffer(int(allocation), int(nbytes), allocation)

    def free(self, buffer: Buffer) -> None:
        if buffer.handle is not None:
            buffer.handle.free()
            self.allocated -= buffer.nbytes
            buffer.handle = None

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        self.cuda.memset_d8_async(ptr, int(byte), int(nbytes), self.stream)

    def launch(self, function: Any, grid, block, shared: int, params: Sequence[Any]) -> None:
        function(*params, grid=tuple(int(g) for g in grid), block=tuple(int(b) for b in block),
                 shared=int(shared), stream=self.stream)

    def new_event(self) -> Any:
        return self.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def event_done(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end.time_since(start))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def copy_to_host(self, ptr: int, nbytes: int) -> bytes:
        self.stream.synchronize()
        host = np.empty(int(nbytes), dtype=np.uint8)
        self.cuda.memcpy_dtoh(host, ptr)
        return host.tobytes()

    def copy_from_host(self, ptr: int, data: bytes) -> None:
        self.stream.synchronize()
        self.cuda.memcpy_htod(ptr, np.frombuffer(bytes(data), dtype=np.uint8))

    def mem_info(self) -> tuple[int, int]:
        free, total = self.cuda.mem_get_info()
        return int(free), int(total)


def make_device() -> PycudaDevice:
    return PycudaDevice(int(os.environ.get("KERNELLAB_GPU_INDEX", "0")))


class PycudaBackend(GpuBackend):
    name = "pycuda"
    device_module = "gpu_runner.backends.pycuda"
    compiles_in_worker = True
