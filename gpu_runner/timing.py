"""How to time: warm-up, fresh inputs and an L2 flush before every timed run, CUDA events on the
stream that runs the kernels, reference and candidate alternated, median + IQR + n + CV."""
from __future__ import annotations

import math
import statistics
import time
from typing import Sequence

from .backends.base import Buffer, Device
from .plan import Inputs, Side
from .result import TimingStats
from .runtime_ops import RuntimeOps, derive_seed
from .validation import prepare_side, wait_for


def summarize(samples: Sequence[float]) -> TimingStats:
    if not samples:
        raise ValueError("no timing samples")
    ordered = sorted(samples)
    n = len(ordered)
    median = statistics.median(ordered)
    if n >= 4:
        q = statistics.quantiles(ordered, n=4, method="inclusive")
        iqr = q[2] - q[0]
    else:
        iqr = ordered[-1] - ordered[0]
    mean = statistics.fmean(ordered)
    cv = statistics.pstdev(ordered) / mean if mean > 0 and n > 1 else 0.0
    return TimingStats(median_ms=median, iqr_ms=iqr, n=n, cv=cv, min_ms=ordered[0])


def flush_size(l2_bytes: int, requested: int = 0) -> int:
    return requested or max(256 << 20, 4 * l2_bytes)


class Timer:
    """Times sides of one size case; `flush` is a buffer larger than L2, written before each run."""

    def __init__(self, device: Device, inputs: Inputs, flush: Buffer, seed: int, timeout_s: float):
        self.device = device
        self.inputs = inputs
        self.flush = flush
        self.seed = seed
        self.timeout_s = timeout_s
        self._events: list = []

    def _event_pair(self, index: int):
        while len(self._events) <= 2 * index + 1:
            self._events.append(self.device.new_event())
        return self._events[2 * index], self._events[2 * index + 1]

    def _enqueue(self, side: Side, rep: int, slot: int) -> None:
        rep_seed = derive_seed(self.seed, "timing", rep)
        self.inputs.fill(rep_seed)
        prepare_side(side, rep, rep_seed)
        head_start = getattr(self.device, "head_start", None)
        if head_start is not None:   # a device whose calls cost the host more than a launch (PyTorch programs)
            # before the flush, not between it and the start event: the call starts right after the flush, on
            # the L2 it leaves, as a CUDA side's does and as in triton's do_bench
            head_start()
        self.device.memset(self.flush.ptr, rep & 0xFF, self.flush.nbytes)
        start, end = self._event_pair(slot)
        self.device.record(start)
        side.run()
        self.device.record(end)

    def run_untimed(self, side: Side, rep: int) -> None:
        """Run `side` on the inputs of repetition `rep` again, without events, and wait."""
        rep_seed = derive_seed(self.seed, "timing", rep)
        self.inputs.fill(rep_seed)
        prepare_side(side, rep, rep_seed)
        side.run()
        wait_for(self.device, self.timeout_s)

    def run(self, sides: Sequence[Side], reps: int, first_rep: int = 0) -> list[list[float]]:
        """`reps` timed runs of every side, the order rotating each repetition; ms per side."""
        slot = 0
        order = []
        for rep in range(first_rep, first_rep + reps):
            rotation = rep % len(sides)
            for k in range(len(sides)):
                index = (k + rotation) % len(sides)
                self._enqueue(sides[index], rep, slot)
                order.append((index, slot))
                slot += 1
            if slot % 64 == 0:   # keep the queue short enough that a hang is seen early
                wait_for(self.device, self.timeout_s * 64)
        wait_for(self.device, self.timeout_s * max(1, slot))
        samples: list[list[float]] = [[] for _ in sides]
        for index, s in order:
            start, end = self._event_pair(s)
            samples[index].append(self.device.elapsed_ms(start, end))
        return samples


def time_sides(timer: Timer, sides: Sequence[Side], *, warmup: int, min_reps: int, max_reps: int,
               target_ms: float) -> list[list[float]]:
    warm = timer.run(sides, max(1, warmup), first_rep=1_000_000)
    slowest = max(max(statistics.median(s), 1e-4) for s in warm)
    reps = int(min(max_reps, max(min_reps, math.ceil(target_ms / slowest))))
    return timer.run(sides, reps)


def escape_probe(device: Device, ops: RuntimeOps, side: Side, runs: int, timeout_s: float) -> dict:
    """Event time vs host wall time of synchronised runs, and the same for as many empty launches.

    Work that escapes the events (still running when the end event fires) shows up as wall time
    that the empty launches do not explain.
    """
    def probe(run) -> tuple[float, float]:
        wait_for(device, timeout_s)
        start, end = device.new_event(), device.new_event()
        t0 = time.perf_counter()
        device.record(start)
        run()
        device.record(end)
        device.synchronize()   # the side already finished in validation and timing: no hang here
        wall = (time.perf_counter() - t0) * 1e3
        return device.elapsed_ms(start, end), wall

    def noop_plan() -> None:
        for _ in range(max(1, side.launches)):
            ops.noop()

    cand = [probe(side.run) for _ in range(runs)]
    noop = [probe(noop_plan) for _ in range(runs)]
    return {"event_ms": statistics.median(c[0] for c in cand), "wall_ms": statistics.median(c[1] for c in cand),
            "noop_event_ms": statistics.median(n[0] for n in noop),
            "noop_wall_ms": statistics.median(n[1] for n in noop), "runs": runs}
