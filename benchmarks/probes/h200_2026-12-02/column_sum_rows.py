"""Hand probe on the H200 (2026-12-02, not part of the project): can a column sum of a 4096x4096 float32
matrix reach 70% of the copy-bandwidth roofline at all? Blocks that read whole rows (each thread four
columns as float4, rows split over gridDim.y) with the partial sums combined by float4 atomics into a
zeroed output or by a second kernel, beside a sum of every element (the same bytes read, one
accumulator: the read-bandwidth ceiling of this size) and a 64 MiB copy. 256 MiB flush, CUDA events,
median of 40.

    cd benchmarks/probes/h200_2026-12-02 && OUT=. python3 column_sum_rows.py   # needs cupy and a GPU

Result: benchmarks/results/probe_column_sum_rows_h200_2026-12-02.json (whole rows: 43-57%; its "sum of
every element" funnels every warp's atomic into one address, so it is no ceiling: read_floor.py is).
"""
import json
import os

import cupy as cp
import numpy as np

from flushed import copy_bandwidth, timeit

R, C = 4096, 4096
bw = copy_bandwidth()
x = cp.random.standard_normal((R, C), dtype=cp.float32)
out = cp.empty((C,), dtype=cp.float32)
ref = x.sum(axis=0)
nbytes = x.nbytes + out.nbytes
small_dst = cp.empty_like(x)
res = {"copy 64 MiB (read+write)": {"ms": timeit(lambda: small_dst.__setitem__(Ellipsis, x), 40)}}
res["copy 64 MiB (read+write)"]["gbs"] = 2 * x.nbytes / (res["copy 64 MiB (read+write)"]["ms"] * 1e-3) / 1e9

CODE = r'''
extern "C" __global__ void rows_part(const float* __restrict__ x, float* __restrict__ part, int rows, int cols, int per) {
  int c4 = blockIdx.x * blockDim.x + threadIdx.x; int cols4 = cols >> 2;
  if (c4 >= cols4) return;
  const float4* xx = reinterpret_cast<const float4*>(x);
  int r0 = blockIdx.y * per, r1 = min(rows, r0 + per);
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll UNROLL
  for (int r = r0; r < r1; ++r) { float4 v = __ldg(xx + (long long)r * cols4 + c4); s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w; }
#if ATOMIC
  atomicAdd(reinterpret_cast<float4*>(part) + c4, s);
#else
  reinterpret_cast<float4*>(part)[(long long)blockIdx.y * cols4 + c4] = s;
#endif
}
extern "C" __global__ void rows_final(const float* __restrict__ part, float* __restrict__ out, int splits, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x; if (c >= cols) return;
  float s = 0.f;
  for (int k = 0; k < splits; ++k) s += part[(long long)k * cols + c];
  out[c] = s;
}
extern "C" __global__ void sum_all(const float* __restrict__ x, float* __restrict__ out, long long n4) {
  const float4* xx = reinterpret_cast<const float4*>(x); float s = 0.f;
#pragma unroll 4
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = __ldg(xx + i); s += (v.x + v.y) + (v.z + v.w); }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}
'''
total = cp.zeros((1,), dtype=cp.float32)
for blocks_per_sm in (2, 4, 8):
    mod = cp.RawModule(code=CODE.replace("UNROLL", "4").replace("#if ATOMIC", "#if 0"), options=("-std=c++17",))
    k = mod.get_function("sum_all")
    grid = 132 * blocks_per_sm
    def run_all():
        total.fill(0); k((grid,), (256,), (x, total, np.int64(x.size // 4)))
    run_all()
    ok = bool(abs(float(total[0]) - float(x.sum())) < 1.0)
    ms = timeit(run_all, 40)
    res[f"sum of every element, {grid} blocks x 256 ok={ok}"] = {"ms": ms}
for atomic in (1, 0):
    for unroll in (4, 8):
        mod = cp.RawModule(code=CODE.replace("UNROLL", str(unroll)).replace("#if ATOMIC", f"#if {atomic}"),
                           options=("-std=c++17",))
        part_k, final_k = mod.get_function("rows_part"), mod.get_function("rows_final")
        for block in (256, 512, 1024):
            for splits in (33, 66, 132, 264):
                per = -(-R // splits)
                part = cp.empty((splits, C), dtype=cp.float32)
                gx = (C // 4 + block - 1) // block
                def run():
                    if atomic:
                        out.fill(0)
                        part_k((gx, splits), (block,), (x, out, np.int32(R), np.int32(C), np.int32(per)))
                    else:
                        part_k((gx, splits), (block,), (x, part, np.int32(R), np.int32(C), np.int32(per)))
                        final_k(((C + 255) // 256,), (256,), (part, out, np.int32(splits), np.int32(C)))
                run()
                ok = bool(cp.allclose(out, ref, rtol=1e-3, atol=1e-2))
                how = "float4 atomics into zeroed out" if atomic else "partials + second kernel"
                res[f"whole rows, {how}, block={block} splits={splits} unroll={unroll} ok={ok}"] = {"ms": timeit(run, 40)}
for key, v in res.items():
    v["fraction"] = nbytes / (v["ms"] * 1e-3) / bw
result = {"copy_gbs": bw / 1e9, "column_sum_4096x4096": res}
for key, v in sorted(res.items(), key=lambda kv: kv[1]["ms"]):
    print(f"{v['ms'] * 1e3:8.2f} us {v['fraction']:6.1%}  {key}")
json.dump(result, open(os.path.join(os.environ.get("OUT", "/tmp"), "column_sum_rows.json"), "w"), indent=1)
