"""The runner's own device work (inputs, poison, comparison, checksums) through a Device."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from importlib import resources

import numpy as np

from .backends.base import Buffer, Device
from .dtypes import DTYPES

INIT_CODES = {"normal": 0, "uniform": 1, "randint": 2, "const": 3}
_BLOCK = 256


def runtime_source() -> str:
    return resources.files("gpu_runner").joinpath("cuda/runtime.cu").read_text()


def derive_seed(*parts: int | str) -> int:
    """A 64-bit seed from a measurement seed and labels (set index, argument, repetition)."""
    import hashlib

    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def parse_init(init: str) -> tuple[int, float, float]:
    if init == "normal":
        return INIT_CODES["normal"], 0.0, 1.0
    if init == "uniform":
        return INIT_CODES["uniform"], -1.0, 1.0
    if init == "ones":
        return INIT_CODES["const"], 1.0, 1.0
    if init == "zeros":
        return INIT_CODES["const"], 0.0, 0.0
    kind, lo, hi = init.split(":")
    return INIT_CODES[kind], float(lo), float(hi)


@dataclass
class Comparison:
    numel: int
    bad: int
    unwritten: int
    max_abs: float
    max_rel: float
    first_bad: int | None
    nan: int
    cand_value: float | None = None
    ref_value: float | None = None


class RuntimeOps:
    def __init__(self, device: Device, sm_count: int):
        self.device = device
        module = device.compile(runtime_source(), [], ["kl_fill", "kl_compare", "kl_checksum", "kl_noop"])
        self.fill_fn = device.function(module, "kl_fill")
        self.compare_fn = device.function(module, "kl_compare")
        self.checksum_fn = device.function(module, "kl_checksum")
        self.noop_fn = device.function(module, "kl_noop")
        self.max_blocks = max(1, sm_count) * 16
        self.scratch = device.alloc(64)

    def _grid(self, n: int) -> tuple[int, int, int]:
        return (max(1, min(self.max_blocks, -(-n // _BLOCK))), 1, 1)

    def fill(self, buffer: Buffer, numel: int, dtype: str, init: str, seed: int) -> None:
        code, lo, hi = parse_init(init)
        self.fill_value(buffer.ptr, numel, dtype, code, lo, hi, seed)

    def fill_value(self, ptr: int, numel: int, dtype: str, code: int, lo: float, hi: float, seed: int) -> None:
        self.device.launch(self.fill_fn, self._grid(numel), (_BLOCK, 1, 1), 0,
                           [np.uint64(ptr), np.int64(numel), np.int32(DTYPES[dtype].code), np.int32(code),
                            np.float64(lo), np.float64(hi), np.uint64(seed & (2**64 - 1))])

    def compare(self, cand: Buffer, ref: Buffer, numel: int, dtype: str, rtol: float, atol: float,
                poison_byte: int) -> Comparison:
        item = DTYPES[dtype].itemsize
        poison = int.from_bytes(bytes([poison_byte]) * item, "little")
        init = struct.pack("<6Q", 0, 0, 0, 0, 2**64 - 1, 0)
        self.device.copy_from_host(self.scratch.ptr, init)
        self.device.launch(self.compare_fn, self._grid(numel), (_BLOCK, 1, 1), 0,
                           [np.uint64(cand.ptr), np.uint64(ref.ptr), np.int64(numel),
                            np.int32(DTYPES[dtype].code), np.int32(item), np.float64(rtol), np.float64(atol),
                            np.uint64(poison), np.uint64(self.scratch.ptr)])
        raw = struct.unpack("<6Q", self.device.copy_to_host(self.scratch.ptr, 48))
        max_abs = struct.unpack("<d", struct.pack("<Q", raw[2]))[0]
        max_rel = struct.unpack("<d", struct.pack("<Q", raw[3]))[0]
        first = None if raw[4] == 2**64 - 1 else raw[4]
        comparison = Comparison(numel, raw[0], raw[1], max_abs, max_rel, first, raw[5])
        if first is not None:
            comparison.cand_value = self.element(cand, first, dtype)
            comparison.ref_value = self.element(ref, first, dtype)
        return comparison

    def element(self, buffer: Buffer, index: int, dtype: str) -> float:
        spec = DTYPES[dtype]
        raw = self.device.copy_to_host(buffer.ptr + index * spec.itemsize, spec.itemsize)
        if dtype == "bfloat16":
            return struct.unpack("<f", struct.pack("<I", int.from_bytes(raw, "little") << 16))[0]
        numpy_name = "float16" if dtype == "float16" else spec.numpy
        return float(np.frombuffer(raw, dtype=numpy_name)[0])

    def checksum(self, buffer: Buffer, nbytes: int) -> int:
        self.device.copy_from_host(self.scratch.ptr, b"\0" * 8)
        self.device.launch(self.checksum_fn, self._grid(max(1, nbytes // 4)), (_BLOCK, 1, 1), 0,
                           [np.uint64(buffer.ptr), np.int64(nbytes), np.uint64(self.scratch.ptr)])
        return struct.unpack("<Q", self.device.copy_to_host(self.scratch.ptr, 8))[0]

    def noop(self) -> None:
        self.device.launch(self.noop_fn, (1, 1, 1), (32, 1, 1), 0, [])
