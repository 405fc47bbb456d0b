"""A CPU stand-in for a GPU Device: memory is numpy, "kernels" are Python functions.

It runs the real worker code (validation, timing, guards' evidence) without a GPU. The runner's own
kernels (fill, compare, checksum) are re-implemented here with the same contracts as runtime.cu.
Simulated time: each kernel adds its `cost_ms`; an event records the simulated clock.
"""
from __future__ import annotations

import bisect
import hashlib
import re
import struct

import numpy as np

from gpu_runner.backends.base import Buffer, CompileFailed, Device, DeviceError
from gpu_runner.dtypes import DTYPES
from gpu_runner.result import Hardware

_CODE_TO_NUMPY = {0: "float32", 1: "float16", 3: "float64", 4: "int32", 5: "int64", 6: "uint32", 7: "uint8"}


class FakeKernel:
    def __init__(self, name, body, cost_ms):
        self.name = name
        self.body = body
        self.cost_ms = cost_ms


class FakeDevice(Device):
    name = "fake"

    def __init__(self, kernels: dict | None = None, *, hardware: Hardware | None = None, extra_wall_s: float = 0.0):
        self.kernels = dict(kernels or {})
        self._hardware = hardware or Hardware("Fake GPU", 4, 1 << 30, 1000.0, 1000.0, 1000.0, "9.0", "fake", 1 << 20)
        self.memory: dict[int, np.ndarray] = {}
        self._bases: list[int] = []
        self._next = 1 << 20
        self.clock_ms = 0.0
        self.launches = 0
        self.extra_wall_s = extra_wall_s

    # -- memory
    def _locate(self, ptr: int) -> tuple[np.ndarray, int]:
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i < 0:
            raise DeviceError("illegal-address", "CUDA_ERROR_ILLEGAL_ADDRESS", True)
        base = self._bases[i]
        array = self.memory.get(base)
        if array is None or ptr - base >= max(1, array.size):
            raise DeviceError("illegal-address", "CUDA_ERROR_ILLEGAL_ADDRESS", True)
        return array, ptr - base

    def view(self, ptr: int, dtype: str, count: int) -> np.ndarray:
        array, offset = self._locate(ptr)
        size = np.dtype(dtype).itemsize
        return array[offset:offset + count * size].view(dtype)

    def hardware(self) -> Hardware:
        return self._hardware

    def compile(self, source, options, kernel_names):
        if "#error" in source:
            raise CompileFailed("kernel.cu(1): error: #error directive")
        return {m: self.kernels[m] for m in re.findall(r"__global__\s+void\s+(\w+)", source) if m in self.kernels}

    def load_cubin(self, cubin):
        return self.compile(cubin.decode(), [], [])

    def function(self, module, name):
        if name.startswith("kl_"):
            return name
        return module[name]

    def set_max_dynamic_shared(self, function, nbytes):
        pass

    def alloc(self, nbytes):
        if getattr(self, "memory_limit", 0) and nbytes > self.memory_limit:
            raise MemoryError("out of memory")
        base = self._next
        self._next += (nbytes + 4095) // 4096 * 4096 + 4096
        self.memory[base] = np.full(nbytes, 0x11, dtype=np.uint8)   # stale contents, never zeros
        bisect.insort(self._bases, base)
        return Buffer(base, nbytes, None)

    def free(self, buffer):
        self.memory.pop(buffer.ptr, None)

    def memset(self, ptr, byte, nbytes):
        array, offset = self._locate(ptr)
        array[offset:offset + nbytes] = byte

    def launch(self, function, grid, block, shared, params):
        self.launches += 1
        if isinstance(function, str):
            getattr(self, "_" + function)(*params)
            return
        if block[0] * block[1] * block[2] > 1024:
            raise DeviceError("invalid-launch", "CUDA_ERROR_INVALID_VALUE: invalid argument", False)
        function.body(self, [int(p) if isinstance(p, np.uint64) else p for p in params])
        self.clock_ms += function.cost_ms
        self._tail_s = self.extra_wall_s     # work that "goes on" after the kernel's end event

    def new_event(self):
        return {"t": None}

    def record(self, event):
        event["t"] = self.clock_ms

    def event_done(self, event):
        return True

    def elapsed_ms(self, start, end):
        return end["t"] - start["t"]

    def synchronize(self):
        if getattr(self, "_tail_s", 0):
            import time
            time.sleep(self._tail_s)
            self._tail_s = 0

    def copy_to_host(self, ptr, nbytes):
        array, offset = self._locate(ptr)
        return array[offset:offset + nbytes].tobytes()

    def copy_from_host(self, ptr, data):
        array, offset = self._locate(ptr)
        array[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)

    def mem_info(self):
        return (1 << 30, 1 << 30)

    # -- the runner's kernels (contracts of runtime.cu)
    def _kl_noop(self):
        pass

    def _kl_fill(self, ptr, n, dtype, init, lo, hi, seed):
        n, dtype, init = int(n), int(dtype), int(init)
        rng = np.random.default_rng(int(seed))
        if init == 0:
            values = rng.standard_normal(n)
        elif init == 1:
            values = lo + (hi - lo) * rng.random(n)
        elif init == 2:
            values = rng.integers(int(lo), int(hi) + 1, n).astype(np.float64)
        else:
            values = np.full(n, float(lo))
        name = _CODE_TO_NUMPY[dtype]
        self.view(int(ptr), name, n)[:] = values.astype(name)

    def _kl_compare(self, cand, ref, n, dtype, itemsize, rtol, atol, poison, result):
        n, itemsize = int(n), int(itemsize)
        raw = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}[itemsize]
        cb = self.view(int(cand), raw, n).astype(np.uint64)
        rb = self.view(int(ref), raw, n).astype(np.uint64)
        name = _CODE_TO_NUMPY[int(dtype)]
        a = self.view(int(cand), name, n).astype(np.float64)
        b = self.view(int(ref), name, n).astype(np.float64)
        differ = cb != rb
        unwritten = differ & (cb == np.uint64(int(poison)))
        rest = differ & ~unwritten
        a_nan, b_nan = np.isnan(a), np.isnan(b)
        nan = rest & (a_nan != b_nan)
        finite = rest & ~a_nan & ~b_nan
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.where(finite, np.abs(a - b), 0.0)
            bad = nan | (finite & (d > atol + rtol * np.abs(b)))
            rel = np.where(finite & (np.abs(b) > atol), d / np.where(np.abs(b) > 0, np.abs(b), 1), 0.0)
        failing = np.flatnonzero(unwritten | bad)
        first = int(failing[0]) if failing.size else 2**64 - 1
        out = struct.pack("<QQddQQ", int(bad.sum()), int(unwritten.sum()), float(d.max(initial=0.0)),
                          float(rel.max(initial=0.0)), first, int(nan.sum()))
        self.copy_from_host(int(result), out)

    def _kl_checksum(self, ptr, nbytes, out):
        data = self.copy_to_host(int(ptr), int(nbytes))
        digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
        self.copy_from_host(int(out), struct.pack("<Q", digest))


def saxpy_body(device, params, *, stride=1, limit=None, scale=1.0):
    x, y, out, a, n = params
    n = int(n)
    stop = n if limit is None else min(n, limit)
    xs, ys, os_ = (device.view(p, "float32", n) for p in (x, y, out))
    os_[:stop:stride] = (np.float32(a) * xs[:stop:stride] + ys[:stop:stride]) * np.float32(scale)
