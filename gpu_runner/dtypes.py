"""Element types a problem may use, with their sizes and their codes in the runtime kernels."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    code: int          # matches KL_* in runtime.cu
    is_float: bool
    numpy: str         # numpy name for scalars; bf16 scalars travel as their bits
    ctype: str


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", 4, 0, True, "float32", "float"),
    DType("float16", 2, 1, True, "uint16", "__half"),
    DType("bfloat16", 2, 2, True, "uint16", "__nv_bfloat16"),
    DType("float64", 8, 3, True, "float64", "double"),
    DType("int32", 4, 4, False, "int32", "int"),
    DType("int64", 8, 5, False, "int64", "long long"),
    DType("uint32", 4, 6, False, "uint32", "unsigned int"),
    DType("uint8", 1, 7, False, "uint8", "unsigned char"),
)}

# Used when a problem's [tolerance] names no entry for a dtype.
DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float64": (1e-10, 1e-12),
    "int32": (0.0, 0.0),
    "int64": (0.0, 0.0),
    "uint32": (0.0, 0.0),
    "uint8": (0.0, 0.0),
}


def scalar_bits(dtype: DType, value: float) -> int | float:
    """The value a scalar kernel parameter carries: half types travel as their 16 bits."""
    import struct

    if dtype.name == "float16":
        return struct.unpack("<H", struct.pack("<e", float(value)))[0]
    if dtype.name == "bfloat16":
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        rounding = 0x7FFF + ((bits >> 16) & 1)
        return ((bits + rounding) >> 16) & 0xFFFF
    if dtype.is_float:
        return float(value)
    return int(value)
