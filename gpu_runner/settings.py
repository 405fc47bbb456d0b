"""How hard a measurement tries: validation sets, repetitions, limits and margins."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MeasureSettings:
    validation_sets: int = 3          # fresh input sets per size case
    warmup: int = 3                   # untimed runs of each side before timing
    min_reps: int = 20                # timed runs of each side, at least ...
    max_reps: int = 200               # ... and at most
    target_timing_ms: float = 300.0   # aim for this much timed GPU time per side
    escape_runs: int = 5              # synchronised runs for the timer-escape guard
    kernel_timeout_s: float = 10.0    # one validation run longer than this is a hang
    roofline_margin: float = 0.8      # reject below this fraction of the roofline floor
    escape_margin_ms: float = 0.5     # wall-clock time beyond the events allowed per run ...
    escape_ratio: float = 1.0         # ... plus this fraction of the event time
    energy_window_s: float = 0.15     # NVML energy window (the counter updates every ~20-100 ms)
    gpu_memory_fraction: float = 0.8  # GPU-side allocation limit, fraction of total memory
    host_memory_bytes: int = 16 << 30  # the worker is killed past this resident size
    flush_bytes: int = 0              # 0: max(256 MiB, 4 x L2)
    check_memoisation: bool = True
    # > 0: reuse the reference's timing from this worker for this many seconds (same process, same
    # GPU, same inputs and settings) and time only the candidate; 0 alternates every time.
    reference_cache_s: float = 0.0

    def with_(self, **changes) -> "MeasureSettings":
        return replace(self, **changes)


# The recorder measures thousands of variants: fewer sets and repetitions, same protocol.
# min_reps=5 only binds for kernels over 8 ms (naive sgemm at 4096^3), where 5 alternated runs
# of each side already spread little.
# The reference is re-timed (alternating with the candidate) at least every 60 s.
RECORD_SETTINGS = MeasureSettings(validation_sets=2, warmup=2, min_reps=5, max_reps=40,
                                  target_timing_ms=40.0, escape_runs=3, reference_cache_s=60.0)
