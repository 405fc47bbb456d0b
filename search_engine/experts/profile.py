"""What the experts read: one measured kernel (MeasurementResult dict) and the hardware's ceilings.

The profiler dict holds Nsight Compute metrics by their raw names, as `ncu --csv --page raw
--print-units base` prints them (durations in ns, sizes in bytes, rates per second, percentages
0-100). The compiler dict holds ptxas facts and SASS opcode counts (`cuobjdump --dump-sass`, opcode
with its modifiers, e.g. "LDG.E.128.CONSTANT").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

# ---- ceilings ---------------------------------------------------------------------------------
# Defaults are the H200's (the GPU this project measures on), used only when the hardware dict
# lacks the figure. Copy bandwidth: a 2 GiB device-to-device copy, bytes read plus written, measured
# on the H200 on 2026-11-29 (tests/fixtures/ncu/raw/log.txt: 4133.5 GB/s, 86% of the 4814 GB/s
# that NVML's memory clock and bus width give). FP32: 132 SMs x 128 FP32 lanes x 2 FLOP x 1.98 GHz.
DEFAULT_MEMORY_GBS = 4130.0
DEFAULT_FP32_TFLOPS = 66.9
# Share of the theoretical DRAM bandwidth that a plain copy reaches (4133.5 / 4814.3 on the H200);
# used when the hardware dict gives only the theoretical figure.
COPY_EFFICIENCY = 0.86
# FP32 lanes per SM by compute capability (CUDA C Programming Guide, arithmetic instruction
# throughput table): 64 on 6.0, 7.x and 8.0; 128 on 6.1, 8.6, 8.9, 9.0 and later.
_FP32_LANES = {"6.0": 64, "7.0": 64, "7.2": 64, "7.5": 64, "8.0": 64}
# Dense tensor-core rates of the H100/H200 SXM by NVIDIA's datasheet (TFLOP/s); leads, for advice.
HOPPER_TENSOR_TFLOPS = {"tf32": 494.7, "fp16": 989.4, "bf16": 989.4}


@dataclass(frozen=True)
class Peaks:
    memory_gbs: float
    fp32_tflops: float
    power_limit_w: float | None
    compute_capability: str | None
    source: dict[str, str] = field(default_factory=dict)

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity where the FP32 roofline meets the memory roofline."""
        return self.fp32_tflops * 1e12 / (self.memory_gbs * 1e9)

    @property
    def tensor_tflops(self) -> dict[str, float]:
        return dict(HOPPER_TENSOR_TFLOPS) if (self.compute_capability or "").startswith("9.") else {}

    @classmethod
    def from_hardware(cls, hardware: Mapping[str, Any] | None) -> "Peaks":
        hw = dict(hardware or {})
        source: dict[str, str] = {}
        if _positive(hw.get("measured_copy_gbs")):
            memory, source["memory_gbs"] = float(hw["measured_copy_gbs"]), "hardware.measured_copy_gbs"
        elif _positive(hw.get("memory_bandwidth_gbs")):
            memory = float(hw["memory_bandwidth_gbs"]) * COPY_EFFICIENCY
            source["memory_gbs"] = f"hardware.memory_bandwidth_gbs x {COPY_EFFICIENCY}"
        else:
            memory, source["memory_gbs"] = DEFAULT_MEMORY_GBS, "default (H200 measured copy)"
        cc = str(hw["compute_capability"]) if hw.get("compute_capability") else None
        if _positive(hw.get("peak_fp32_tflops")):
            fp32, source["fp32_tflops"] = float(hw["peak_fp32_tflops"]), "hardware.peak_fp32_tflops"
        elif _positive(hw.get("sm_count")) and _positive(hw.get("sm_clock_mhz")):
            lanes = _FP32_LANES.get(cc or "", 128)
            fp32 = float(hw["sm_count"]) * lanes * 2 * float(hw["sm_clock_mhz"]) * 1e6 / 1e12
            source["fp32_tflops"] = f"sm_count x {lanes} lanes x 2 x sm_clock_mhz"
        else:
            fp32, source["fp32_tflops"] = DEFAULT_FP32_TFLOPS, "default (H200)"
        power = float(hw["power_limit_w"]) if _positive(hw.get("power_limit_w")) else None
        return cls(memory_gbs=memory, fp32_tflops=fp32, power_limit_w=power, compute_capability=cc,
                   source=source)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


# ---- the measured kernel ------------------------------------------------------------------------
_WIDTH = re.compile(r"\.(128|64|U16|S16|U8|S8)(?:\.|$)")
_WIDTH_BYTES = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


@dataclass(frozen=True)
class KernelProfile:
    metrics: Mapping[str, float]
    compiler: Mapping[str, Any]
    timing: Mapping[str, Any]
    energy: Mapping[str, Any] | None
    peaks: Peaks
    flops: float | None
    bytes: float | None

    @classmethod
    def from_measurement(cls, measurement: Mapping[str, Any], *, flops: float | None, bytes: float | None,
                         hardware: Mapping[str, Any] | None) -> "KernelProfile":
        metrics = {k: float(v) for k, v in (measurement.get("profiler") or {}).items()
                   if isinstance(v, (int, float)) and math.isfinite(v)}
        return cls(metrics=metrics, compiler=dict(measurement.get("compiler") or {}),
                   timing=dict(measurement.get("candidate") or {}),
                   energy=measurement.get("energy") or None,
                   peaks=Peaks.from_hardware(hardware if hardware is not None else measurement.get("hardware")),
                   flops=float(flops) if _positive(flops) else None,
                   bytes=float(bytes) if _positive(bytes) else None)

    def metric(self, *names: str) -> float | None:
        """The first of `names` that was measured."""
        for name in names:
            if name in self.metrics:
                return self.metrics[name]
        return None

    @property
    def has_profile(self) -> bool:
        return bool(self.metrics)

    @property
    def duration_s(self) -> float | None:
        """The candidate's median time from the runner's timing, else Nsight Compute's duration."""
        median = self.timing.get("median_ms")
        if _positive(median):
            return float(median) * 1e-3
        ns = self.metric("gpu__time_duration.sum")
        return ns * 1e-9 if ns else None

    @property
    def sass(self) -> Mapping[str, int]:
        return self.compiler.get("sass") or {}

    def sass_count(self, *prefixes: str) -> int:
        """Static count of SASS instructions whose opcode starts with one of `prefixes` (e.g. "HMMA")."""
        return sum(n for op, n in self.sass.items() if op.split(".")[0] in prefixes)

    def sass_access_widths(self, *opcodes: str) -> dict[int, int]:
        """{bytes per thread: static count} for memory opcodes such as LDG or STG."""
        widths: dict[int, int] = {}
        for op, n in self.sass.items():
            if op.split(".")[0] in opcodes:
                match = _WIDTH.search(op)
                width = _WIDTH_BYTES[match.group(1)] if match else 4
                widths[width] = widths.get(width, 0) + n
        return widths

    def stall_cycles(self) -> dict[str, float]:
        """Warp-state cycles per issued instruction by stall reason (WarpStateStats)."""
        prefix, suffix = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
        return {k[len(prefix):-len(suffix)]: v for k, v in self.metrics.items()
                if k.startswith(prefix) and k.endswith(suffix)}
