"""Hand probe on the H200 (2026-12-02, not part of the project): the fastest read of 64 MiB under the
runner's timing protocol, and what the protocol's cold-L2 flush costs a short kernel.

The runner (and triton's do_bench) empties L2 by WRITING a buffer larger than L2 before every timed run,
so each timed run starts with L2 full of dirty lines that must go back to memory while it reads. Here the
same kernels are timed after that flush ("dirty") and after the same write followed by a read of another
256 MiB buffer ("clean": the dirty lines are written back before the start event). Kernels: a read-only
floor (float4 grid-stride loads, one partial per block, no atomics), the column sum the search found
(own_kernels_h200_2026-12-02_first-call.json), the naive reference, and a 64 MiB copy. CUDA events, median of 40.

    cd benchmarks/probes/h200_2026-12-02 && OUT=. python3 read_floor.py   # needs cupy and a GPU

Result: benchmarks/results/probe_read_floor_h200_2026-12-02.json (dirty: the pure read 25.5 us, 62% of
bytes / copy bandwidth, the found column sum 25.8 us; clean: 19.4 and 19.5 us, 82% and 81%).
"""
import json
import os

import cupy as cp
import numpy as np

from flushed import copy_bandwidth, timeit, write_flush

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "..", "results", "own_kernels_h200_2026-12-02_first-call.json")
FOUND = {k["name"]: k for k in json.load(open(RESULTS))["kernels"]}["column_sum"]
REFERENCE = open(os.path.join(HERE, "..", "..", "..", "tests", "gpu_runner", "own_kernels", "column_sum",
                              "reference.cu")).read()
R, C = 4096, 4096
other = cp.ones(256 << 20, dtype=cp.uint8)
FLOOR = r'''
extern "C" __global__ void read_floor(const float4* __restrict__ x, float* __restrict__ part, long long n4) {
  float s = 0.f;
#pragma unroll UNROLL
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = __ldg(x + i); s += (v.x + v.y) + (v.z + v.w); }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __shared__ float w[32];
  if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) { float t = 0.f; for (int k = 0; k < (int)(blockDim.x >> 5); ++k) t += w[k]; part[blockIdx.x] = t; }
}
'''
touch = cp.RawModule(code=FLOOR.replace("UNROLL", "4"), options=("-std=c++17",)).get_function("read_floor")
touch_part = cp.empty((4096,), dtype=cp.float32)


def flush_clean():
    write_flush()
    touch((1056,), (256,), (other, touch_part, np.int64(other.nbytes // 16)))


bw = copy_bandwidth()
x = cp.random.standard_normal((R, C), dtype=cp.float32)
out = cp.empty((C,), dtype=cp.float32)
ref = x.sum(axis=0)
copy_dst = cp.empty_like(x)
rows = {}


def add(name, fn, nbytes):
    for mode, before in (("dirty", write_flush), ("clean", flush_clean)):
        ms = timeit(fn, 40, before)
        rows.setdefault(name, {})[mode] = {"ms": ms, "fraction_of_copy_roofline": nbytes / (ms * 1e-3) / bw}


read_bytes = x.nbytes + out.nbytes
for blocks_per_sm in (2, 4, 8):
    for unroll in (4, 8):
        k = cp.RawModule(code=FLOOR.replace("UNROLL", str(unroll)), options=("-std=c++17",)).get_function("read_floor")
        grid = 132 * blocks_per_sm
        part = cp.empty((grid,), dtype=cp.float32)
        k((grid,), (256,), (x, part, np.int64(x.size // 4)))
        ok = bool(abs(float(part.sum()) - float(x.sum())) < 1.0)
        add(f"read floor: {grid} blocks x 256, unroll {unroll}, ok={ok}",
            lambda k=k, grid=grid, part=part: k((grid,), (256,), (x, part, np.int64(x.size // 4))), read_bytes)
found = cp.RawModule(code=FOUND["best_source"], options=("-std=c++17",)).get_function("column_sum")
grid = (C // 32, 1)
found(grid, (32, 32), (x, out, np.int32(R), np.int32(C)))
add(f"column sum found by the search (column-tile 32x32 + read-only), ok={bool(cp.allclose(out, ref, rtol=1e-3, atol=1e-2))}",
    lambda: found(grid, (32, 32), (x, out, np.int32(R), np.int32(C))), read_bytes)
naive = cp.RawModule(code=REFERENCE, options=("-std=c++17",)).get_function("column_sum")
add("column sum reference (one thread per column)",
    lambda: naive(((C + 255) // 256,), (256,), (x, out, np.int32(R), np.int32(C))), read_bytes)
add("copy 64 MiB (128 MiB moved)", lambda: copy_dst.__setitem__(Ellipsis, x), 2 * x.nbytes)
result = {"copy_gbs_1gib_dirty_flush": bw / 1e9, "bytes_read_column_sum": read_bytes, "rows": rows}
print(f"copy bandwidth (1 GiB, dirty flush): {bw / 1e9:.0f} GB/s")
print(f"{'kernel':<84}{'dirty us':>9}{'frac':>7}{'clean us':>9}{'frac':>7}")
for name, r in rows.items():
    print(f"{name:<84}{r['dirty']['ms'] * 1e3:9.2f}{r['dirty']['fraction_of_copy_roofline']:7.1%}"
          f"{r['clean']['ms'] * 1e3:9.2f}{r['clean']['fraction_of_copy_roofline']:7.1%}")
json.dump(result, open(os.path.join(os.environ.get("OUT", "/tmp"), "read_floor.json"), "w"), indent=1)
