"""Describe the GPU a measurement ran on: name, SMs, memory size and bandwidth, clocks, driver."""
from __future__ import annotations

import os
from typing import Any, Mapping

from .result import Hardware


def nvml_index(device_index: int = 0) -> int:
    """NVML ignores CUDA_VISIBLE_DEVICES: map the CUDA device a worker sees to NVML's numbering, so
    a worker pinned to GPU 3 reads GPU 3's energy and clocks. NVML counts GPUs in PCI bus order,
    which is CUDA's order too under CUDA_DEVICE_ORDER=PCI_BUS_ID (the worker launcher sets it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if device_index < len(visible) and visible[device_index].strip().isdigit():
        return int(visible[device_index])
    return device_index


def describe(props: Mapping[str, Any], *, device_index: int = 0, driver_fallback: str = "") -> Hardware:
    """From CUDA device properties, completed by NVML (max clocks, bus width, driver) where it answers."""
    name = props.get("name", "GPU")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    sm_clock = float(props.get("clockRate", 0) or 0) / 1e3
    mem_clock = float(props.get("memoryClockRate", 0) or 0) / 1e3
    bus_width = int(props.get("memoryBusWidth", 0) or 0)
    driver = driver_fallback
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index))
        sm_clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)) or sm_clock
        mem_clock = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)) or mem_clock
        try:
            bus_width = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle)) or bus_width
        except (pynvml.NVMLError, AttributeError):
            pass
        version = pynvml.nvmlSystemGetDriverVersion()
        driver = version.decode() if isinstance(version, bytes) else str(version)
        nvml_name = pynvml.nvmlDeviceGetName(handle)
        name = nvml_name.decode() if isinstance(nvml_name, bytes) else str(nvml_name)
    except Exception:  # noqa: BLE001 - NVML is optional; CUDA's properties stand alone
        pass
    # HBM and GDDR transfer twice per memory clock.
    bandwidth = 2.0 * mem_clock * 1e6 * bus_width / 8 / 1e9 if mem_clock and bus_width else 0.0
    return Hardware(name=str(name), sm_count=int(props.get("multiProcessorCount", 0)),
                    memory_bytes=int(props.get("totalGlobalMem", 0)), memory_bandwidth_gbs=round(bandwidth, 1),
                    sm_clock_mhz=sm_clock, mem_clock_mhz=mem_clock,
                    compute_capability=f"{props.get('major', 0)}.{props.get('minor', 0)}", driver=driver,
                    l2_bytes=int(props.get("l2CacheSize", 0) or 0))
