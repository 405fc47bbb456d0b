"""Energy from NVML's total-energy counter (mJ since the driver loaded) over a window of repeated
launches; the counter moves in steps, so the window must be long (>= 100 ms)."""
from __future__ import annotations

import time

from ..result import Energy
from . import ObserverUnavailable

MIN_WINDOW_S = 0.1


class NvmlEnergyObserver:
    def __init__(self, device_index: int = 0):
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            from ..hardware import nvml_index

            self.handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index))
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except ImportError:
            raise ObserverUnavailable("nvidia-ml-py (pynvml) is not installed") from None
        except Exception as exc:  # noqa: BLE001 - any NVML failure means no energy reading
            raise ObserverUnavailable(f"NVML energy counter unavailable: {exc}") from None
        self._start: tuple[int, float] | None = None
        self._end: tuple[int, float] | None = None

    def _read(self) -> tuple[int, float]:
        return int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)), time.perf_counter()

    def before_start(self) -> None:
        self._start = self._read()

    def after_finish(self) -> None:
        self._end = self._read()

    def get_results(self, launches: int) -> Energy:
        if self._start is None or self._end is None:
            raise ObserverUnavailable("the energy window was not opened and closed")
        millijoules = self._end[0] - self._start[0]
        seconds = self._end[1] - self._start[1]
        if seconds < MIN_WINDOW_S:
            raise ObserverUnavailable(f"the window of {seconds * 1e3:.0f} ms is too short to resolve the counter")
        if millijoules <= 0:
            raise ObserverUnavailable(f"the energy counter did not move over {seconds * 1e3:.0f} ms")
        joules = millijoules / 1e3
        return Energy(j_per_call=joules / launches, mean_w=joules / seconds, window_s=seconds, launches=launches)
