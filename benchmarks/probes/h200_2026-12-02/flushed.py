"""What the three probes of this folder share: the runner's kind of L2 flush (a 256 MiB write) and a
CUDA-event timer that runs it before every timed call, and the 1 GiB copy bandwidth timed the same way.

The warm-up calls flush too. (Before this module, probe.py and column_sum_rows.py did not flush before
their three warm-ups; their recorded results came from those versions. Warm-ups are not timed.)"""
import statistics

import cupy as cp

flush = cp.empty(256 << 20, dtype=cp.uint8)


def write_flush():
    flush.fill(1)


def timeit(fn, reps=30, before=write_flush):
    """Median ms of `reps` CUDA-event timings of `fn`, each after `before` (3 untimed warm-ups first)."""
    ts = []
    for _ in range(3):
        before(); fn()
    for _ in range(reps):
        before()
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e))
    return statistics.median(ts)


def copy_bandwidth(reps=20, before=write_flush):
    """Bytes per second of a 1 GiB device copy (read + write counted), timed as above."""
    src = cp.ones((1 << 28,), dtype=cp.float32)
    dst = cp.empty_like(src)
    return 2 * src.nbytes / (timeit(lambda: dst.__setitem__(Ellipsis, src), reps, before) * 1e-3)
