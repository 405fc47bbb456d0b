"""Hand probes on the H200 (2026-12-02, not part of the project): what limits the own row softmax and column
sum after the search (the searches' best kernels, read from own_kernels_h200_2026-12-02_first-call.json, beside
hand-written ones), timed with a 256 MiB flush and CUDA events, median of 30.

    cd benchmarks/probes/h200_2026-12-02 && OUT=. python3 probe.py   # needs cupy and a GPU

Result: benchmarks/results/probe_softmax_column_sum_h200_2026-12-02.json."""
import json
import os

import cupy as cp
import numpy as np

from flushed import copy_bandwidth, timeit

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "results", "own_kernels_h200_2026-12-02_first-call.json")
FOUND = {k["name"]: k["best_source"] for k in json.load(open(RESULTS))["kernels"]}
ROWS, COLS = 8192, 1024
CR, CC = 4096, 4096
bw = copy_bandwidth()
out = {"copy_gbs": bw / 1e9}

COMMON = r'''
__device__ __forceinline__ float wmax(float v){ for(int o=16;o>0;o>>=1) v=fmaxf(v,__shfl_xor_sync(0xffffffffu,v,o)); return v;}
__device__ __forceinline__ float wsum(float v){ for(int o=16;o>0;o>>=1) v+=__shfl_xor_sync(0xffffffffu,v,o); return v;}
'''
SM_V4 = COMMON + r'''
extern "C" __global__ void sm_v4(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  int warp = (blockIdx.x*blockDim.x + threadIdx.x) >> 5; int lane = threadIdx.x & 31;
  for (int row = warp * RPW; row < min(rows, (warp + 1) * RPW); ++row) {
    const float4* in = reinterpret_cast<const float4*>(x + (long long)row*cols);
    float4* o = reinterpret_cast<float4*>(out + (long long)row*cols);
    float4 v[8]; float m = -3.4e38f;
#pragma unroll
    for (int k=0;k<8;++k){ v[k]=__ldg(in + lane + 32*k); m=fmaxf(m,fmaxf(fmaxf(v[k].x,v[k].y),fmaxf(v[k].z,v[k].w)));}
    m = wmax(m); float s = 0.f;
#pragma unroll
    for (int k=0;k<8;++k){ v[k].x=__expf(v[k].x-m); v[k].y=__expf(v[k].y-m); v[k].z=__expf(v[k].z-m); v[k].w=__expf(v[k].w-m); s+=v[k].x+v[k].y+v[k].z+v[k].w; }
    s = wsum(s); float inv = 1.f/s;
#pragma unroll
    for (int k=0;k<8;++k) o[lane+32*k] = make_float4(v[k].x*inv, v[k].y*inv, v[k].z*inv, v[k].w*inv);
  }
}
'''
SM_S1 = COMMON + r'''
extern "C" __global__ void sm_s1(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  int row = (blockIdx.x*blockDim.x + threadIdx.x) >> 5; int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* in = x + (long long)row*cols; float* o = out + (long long)row*cols;
  float v[32]; float m = -3.4e38f;
#pragma unroll
  for (int k=0;k<32;++k){ v[k]=__ldg(in + lane + 32*k); m=fmaxf(m,v[k]); }
  m = wmax(m); float s = 0.f;
#pragma unroll
  for (int k=0;k<32;++k){ v[k]=__expf(v[k]-m); s+=v[k]; }
  s = wsum(s); float inv = 1.f/s;
#pragma unroll
  for (int k=0;k<32;++k) o[lane+32*k] = v[k]*inv;
}
'''
x = cp.random.standard_normal((ROWS, COLS), dtype=cp.float32); y = cp.empty_like(x)
ref = cp.exp(x - x.max(axis=1, keepdims=True)); ref /= ref.sum(axis=1, keepdims=True)
sm_bytes = 2 * x.nbytes
res = {}
best = FOUND["row_softmax"]
k = cp.RawModule(code=best, options=("-std=c++17",)).get_function("row_softmax")
res["found (warp-per-row WARPS=1 + row-cache 32)"] = timeit(lambda: k((ROWS,), (32,), (x, y, np.int32(ROWS), np.int32(COLS))))
for name, code, fn, variants in (("scalar32 one pass exp kept", SM_S1, "sm_s1", [("", 128), ("", 32), ("", 256)]),
                                 ("float4 cache", SM_V4, "sm_v4", [("1", 128), ("1", 32), ("2", 128), ("4", 128), ("1", 256)])):
    for rpw, block in variants:
        opts = ("-std=c++17",) + ((f"-DRPW={rpw}",) if rpw else ())
        kern = cp.RawModule(code=code, options=opts).get_function(fn)
        warps = ROWS // (int(rpw) if rpw else 1)
        grid = (warps * 32 + block - 1) // block
        y.fill(0)
        kern((grid,), (block,), (x, y, np.int32(ROWS), np.int32(COLS)))
        ok = bool(cp.allclose(y, ref, rtol=1e-4, atol=1e-6))
        res[f"{name} rows/warp={rpw or 1} block={block} ok={ok}"] = timeit(lambda: kern((grid,), (block,), (x, y, np.int32(ROWS), np.int32(COLS))))
out["softmax"] = {k: {"ms": v, "fraction": sm_bytes / (v * 1e-3) / bw} for k, v in res.items()}

CS_V4 = r'''
extern "C" __global__ void cs_v4(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  __shared__ float4 part[TR][32];
  int c4 = blockIdx.x * 32 + threadIdx.x;      // float4 column index
  float4 s = make_float4(0,0,0,0);
  const float4* xx = reinterpret_cast<const float4*>(x);
  int cols4 = cols / 4;
#pragma unroll 4
  for (int r = blockIdx.y * TR + threadIdx.y; r < rows; r += gridDim.y * TR) {
    float4 v = __ldg(xx + (long long)r * cols4 + c4); s.x+=v.x; s.y+=v.y; s.z+=v.z; s.w+=v.w; }
  part[threadIdx.y][threadIdx.x] = s; __syncthreads();
  for (int h = TR/2; h > 0; h >>= 1) { if (threadIdx.y < h) { float4 a = part[threadIdx.y][threadIdx.x], b = part[threadIdx.y+h][threadIdx.x];
      part[threadIdx.y][threadIdx.x] = make_float4(a.x+b.x,a.y+b.y,a.z+b.z,a.w+b.w);} __syncthreads(); }
  if (threadIdx.y == 0) { float4 t = part[0][threadIdx.x];
    if (gridDim.y == 1) { reinterpret_cast<float4*>(out)[c4] = t; }
    else { atomicAdd(out + 4*c4, t.x); atomicAdd(out + 4*c4+1, t.y); atomicAdd(out + 4*c4+2, t.z); atomicAdd(out + 4*c4+3, t.w);} }
}
'''
CS_S = r'''
extern "C" __global__ void cs_s(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  __shared__ float part[TR][32];
  int c = blockIdx.x * 32 + threadIdx.x; float s = 0.f;
#pragma unroll 8
  for (int r = blockIdx.y * TR + threadIdx.y; r < rows; r += gridDim.y * TR) s += __ldg(x + (long long)r * cols + c);
  part[threadIdx.y][threadIdx.x] = s; __syncthreads();
  for (int h = TR/2; h > 0; h >>= 1) { if (threadIdx.y < h) part[threadIdx.y][threadIdx.x] += part[threadIdx.y+h][threadIdx.x]; __syncthreads(); }
  if (threadIdx.y == 0) { if (gridDim.y == 1) out[c] = part[0][threadIdx.x]; else atomicAdd(out + c, part[0][threadIdx.x]); }
}
'''
xc = cp.random.standard_normal((CR, CC), dtype=cp.float32); oc = cp.empty((CC,), dtype=cp.float32)
refc = xc.sum(axis=0)
cs_bytes = xc.nbytes + oc.nbytes
res = {}
best = FOUND["column_sum"]
k = cp.RawModule(code=best, options=("-std=c++17",)).get_function("column_sum")
res["found (column-tile 32x32 + read-only)"] = timeit(lambda: k((CC // 32, 1), (32, 32), (xc, oc, np.int32(CR), np.int32(CC))))
for name, code, fn, per_block in (("float4 columns", CS_V4, "cs_v4", 128), ("scalar columns", CS_S, "cs_s", 32)):
    for tr in (8, 16, 32):
        for split in (1, 4, 16, 32):
            kern = cp.RawModule(code=code, options=("-std=c++17", f"-DTR={tr}")).get_function(fn)
            grid = (CC // per_block, split)
            def run():
                if split > 1: oc.fill(0)
                kern(grid, (32, tr), (xc, oc, np.int32(CR), np.int32(CC)))
            run(); ok = bool(cp.allclose(oc, refc, rtol=1e-3, atol=1e-2))
            res[f"{name} TR={tr} split={split} ok={ok}"] = timeit(run)
out["column_sum"] = {k: {"ms": v, "fraction": cs_bytes / (v * 1e-3) / bw} for k, v in res.items()}
print(json.dumps(out, indent=1))
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe.json"), "w"), indent=1)
