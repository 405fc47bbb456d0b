"""Synthetic recorded datasets: a stand-in for kernellab/problems/<name>/records/h200.jsonl.gz.

NOT GPU DATA. Until the H200 records exist, the search benchmark develops against these families:
real-looking CUDA templates with knobs, rendered like the bundled families (#define lines + the
template), and speedups from a made-up model that rewards the things GPUs reward (vector loads,
work per thread, sensible block sizes, on-chip reuse for compute-bound kernels, shuffles over
atomics) with interactions, spills, failures and measurement noise. The model shares its rules
across families, so a surrogate trained on some families has something to carry to the others —
which real data may or may not offer. Every figure from these records says so in the output.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from dataclasses import dataclass, field

H200 = {"name": "NVIDIA H200 (synthetic)", "sm_count": 132, "memory_bandwidth_gbs": 4800.0,
        "fp32_tflops": 67.0, "compute_capability": "9.0", "memory_bytes": 150 * 2**30}

ELEMENTWISE = r"""
extern "C" __global__ void kernel_family(const float* __restrict__ x, float* __restrict__ y, int n) {
#if defined(LOOP_grid_stride)
    for (int base = (blockIdx.x * BLOCK + threadIdx.x) * ITEMS * VEC; base < n; base += gridDim.x * blockDim.x * ITEMS * VEC) {
#else
    int base = (blockIdx.x * BLOCK + threadIdx.x) * ITEMS * VEC;
    {
#endif
        #pragma unroll UNROLL
        for (int i = 0; i < ITEMS; ++i) {
#if VEC == 4
            int j = base + i * 4;
            if (j + 3 < n) {
                float4 v = reinterpret_cast<const float4*>(x)[j / 4];
                v.x = 2.0f * v.x; v.y = 2.0f * v.y; v.z = 2.0f * v.z; v.w = 2.0f * v.w;
                reinterpret_cast<float4*>(y)[j / 4] = v;
            }
#elif VEC == 2
            int j = base + i * 2;
            if (j + 1 < n) {
                float2 v = reinterpret_cast<const float2*>(x)[j / 2];
                v.x = 2.0f * v.x; v.y = 2.0f * v.y;
                reinterpret_cast<float2*>(y)[j / 2] = v;
            }
#else
            int j = base + i;
            if (j < n) y[j] = 2.0f * x[j];
#endif
        }
    }
}
"""

REDUCE = r"""
extern "C" __global__ void kernel_family(const float* __restrict__ x, float* __restrict__ out, int n) {
    float acc = 0.0f;
    int base = (blockIdx.x * BLOCK + threadIdx.x) * ITEMS * VEC;
    #pragma unroll UNROLL
    for (int i = 0; i < ITEMS * VEC; ++i) {
        int j = base + i;
        if (j < n) acc += x[j];
    }
#if defined(ALGO_atomic)
    atomicAdd(out, acc);
#elif defined(ALGO_shared)
    __shared__ float partial[BLOCK];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, partial[0]);
#else
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffff, acc, offset);
    __shared__ float warp_sums[BLOCK / 32];
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < BLOCK / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffff, acc, offset);
        if (threadIdx.x == 0) atomicAdd(out, acc);
    }
#endif
}
"""

GEMM = r"""
extern "C" __global__ void kernel_family(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    int row0 = blockIdx.y * BM + (threadIdx.x / (BN / TN)) * TM;
    int col0 = blockIdx.x * BN + (threadIdx.x % (BN / TN)) * TN;
    float acc[TM][TN] = {0};
#if defined(ALGO_naive)
    for (int k = 0; k < K; ++k)
        for (int i = 0; i < TM; ++i)
            for (int j = 0; j < TN; ++j)
                acc[i][j] += A[(row0 + i) * K + k] * B[k * N + col0 + j];
#else
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#if VEC == 4
        reinterpret_cast<float4*>(As)[threadIdx.x] = reinterpret_cast<const float4*>(A)[(blockIdx.y * BM) * K / 4 + threadIdx.x];
        reinterpret_cast<float4*>(Bs)[threadIdx.x] = reinterpret_cast<const float4*>(B)[k0 * N / 4 + threadIdx.x];
#else
        As[threadIdx.x] = A[(blockIdx.y * BM) * K + k0 + threadIdx.x];
        Bs[threadIdx.x] = B[k0 * N + threadIdx.x];
#endif
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
#if defined(ALGO_tile2d)
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(threadIdx.x / (BN / TN) * TM + i) * BK + k];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k * BN + threadIdx.x % (BN / TN) * TN + j];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
#else
            for (int i = 0; i < TM; ++i)
                for (int j = 0; j < TN; ++j)
                    acc[i][j] += As[(threadIdx.x / (BN / TN) * TM + i) * BK + k] * Bs[k * BN + threadIdx.x % (BN / TN) * TN + j];
#endif
        }
        __syncthreads();
    }
#endif
    for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) C[(row0 + i) * N + col0 + j] = acc[i][j];
}
"""

TRANSPOSE = r"""
extern "C" __global__ void kernel_family(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
#if defined(ALGO_shared)
    __shared__ float tile[TILE][TILE + PAD];
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
#if defined(ORDER_diagonal)
    int bx = (blockIdx.x + blockIdx.y) % gridDim.x;
#endif
    #pragma unroll UNROLL
    for (int j = 0; j < TILE; j += ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    #pragma unroll
    for (int j = 0; j < TILE; j += ROWS) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
#else
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS) out[x * rows + y + j] = in[(y + j) * cols + x];
#endif
}
"""

SOFTMAX = r"""
extern "C" __global__ void kernel_family(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    float m = -1e30f, s = 0.0f;
#if defined(PASS_online)
    #pragma unroll UNROLL
    for (int c = threadIdx.x * VEC; c < cols; c += BLOCK * VEC) {
        float v = x[row * cols + c];
        float nm = fmaxf(m, v);
        s = s * __expf(m - nm) + __expf(v - nm);
        m = nm;
    }
#else
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, x[row * cols + c]);
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += __expf(x[row * cols + c] - m);
#endif
#if defined(RED_warp)
    for (int o = 16; o > 0; o /= 2) { m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o)); s += __shfl_xor_sync(0xffffffff, s, o); }
#else
    __shared__ float red[BLOCK];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int k = BLOCK / 2; k > 0; k >>= 1) { if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k]; __syncthreads(); }
    s = red[0];
#endif
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[row * cols + c] = __expf(x[row * cols + c] - m) / s;
}
"""


@dataclass
class SyntheticFamily:
    name: str
    template: str
    knobs: dict
    constraints: list
    sizes: dict
    roofline: dict
    launch: list  # launch expressions of sizes and knobs
    reference_ms: float
    args: list
    model: object
    tolerance: dict = field(default_factory=lambda: {"float32": {"rtol": 1e-4, "atol": 1e-5}})


def _elementwise_model(k, rng_hash):
    s = 0.35
    s *= {1: 1.0, 2: 1.45, 4: 1.9}[k["VEC"]]
    s *= {1: 1.0, 2: 1.25, 4: 1.35, 8: 1.2}[k["ITEMS"]]
    s *= math.exp(-0.12 * math.log2(k["BLOCK"] / 256) ** 2)
    s *= {1: 1.0, 2: 1.05, 4: 1.07}[k["UNROLL"]] if k["ITEMS"] >= 2 else 1.0
    s *= 1.1 if k["LOOP"] == "grid_stride" and k["ITEMS"] * k["VEC"] <= 2 else 1.0
    return s


def _reduce_model(k, rng_hash):
    s = {"atomic": 0.25, "shared": 0.8, "warp": 1.3}[k["ALGO"]]
    s *= {1: 1.0, 2: 1.5, 4: 1.9}[k["VEC"]]
    s *= {1: 1.0, 2: 1.4, 4: 1.8, 8: 2.0, 16: 1.9}[k["ITEMS"]]
    s *= math.exp(-0.1 * math.log2(k["BLOCK"] / 256) ** 2)
    if k["ALGO"] == "atomic":
        s *= (k["ITEMS"] * k["VEC"]) ** 0.7
    return s


def _gemm_model(k, rng_hash):
    s = {"naive": 0.7, "smem": 1.6, "tile2d": 3.0}[k["ALGO"]]
    work = k["TM"] * k["TN"]
    if k["ALGO"] == "tile2d":
        s *= {1: 0.4, 4: 1.0, 16: 2.6, 32: 3.3, 64: 3.6}.get(work, 1.0)
    else:
        s *= {1: 1.0, 4: 1.3, 16: 1.2, 32: 0.9, 64: 0.6}.get(work, 1.0)
    s *= 1.35 if k["VEC"] == 4 and k["ALGO"] != "naive" else 1.0
    s *= {8: 0.85, 16: 1.0, 32: 0.95}[k["BK"]]
    threads = k["BM"] * k["BN"] // work
    s *= math.exp(-0.08 * math.log2(max(threads, 32) / 256) ** 2)
    return s


def _transpose_model(k, rng_hash):
    s = {"naive": 0.45, "shared": 1.2}[k["ALGO"]]
    s *= {"row": 1.0, "diagonal": 1.12 if k["ALGO"] == "shared" else 0.95}[k["ORDER"]]
    s *= {1: 1.0, 2: 1.04, 4: 1.02}[k["UNROLL"]]
    if k["ALGO"] == "shared":
        s *= 1.5 if k["PAD"] else 0.75  # bank conflicts without padding
    s *= {16: 0.9, 32: 1.0, 64: 0.85}[k["TILE"]]
    s *= {1: 0.95, 2: 1.0, 4: 1.08, 8: 1.05}[k["ROWS"]]
    return s


def _softmax_model(k, rng_hash):
    s = {"two_pass": 0.9, "online": 1.5}[k["PASS"]]
    s *= {"shared": 1.0, "warp": 1.4}[k["RED"]]
    s *= {1: 1.0, 4: 1.4}[k["VEC"]] if k["PASS"] == "online" else 1.0
    s *= math.exp(-0.1 * math.log2(k["BLOCK"] / 128) ** 2)
    s *= {1: 1.0, 2: 1.1, 4: 1.05}[k["ROWS_PER_BLOCK"]]
    s *= {1: 1.0, 2: 1.04, 4: 1.06}[k["UNROLL"]]
    return s


FAMILIES = [
    SyntheticFamily(
        name="syn_elementwise", template=ELEMENTWISE,
        knobs={"BLOCK": [64, 128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8], "VEC": [1, 2, 4], "UNROLL": [1, 2, 4],
               "LOOP": ["flat", "grid_stride"]},
        constraints=["UNROLL <= ITEMS"], sizes={"N": 1 << 26}, roofline={"flops": "N", "bytes": "8*N"},
        launch=[{"kernel": "kernel_family", "grid": ["ceil_div(N, BLOCK*ITEMS*VEC)"], "block": ["BLOCK"],
                 "shared": "0", "args": ["x", "y", "n"]}],
        reference_ms=0.32, args=["x", "y", "n"], model=_elementwise_model),
    SyntheticFamily(
        name="syn_reduce", template=REDUCE,
        knobs={"BLOCK": [64, 128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8, 16], "VEC": [1, 2, 4],
               "UNROLL": [1, 2, 4], "ALGO": ["atomic", "shared", "warp"]},
        constraints=["UNROLL <= ITEMS * VEC"], sizes={"N": 1 << 26}, roofline={"flops": "N", "bytes": "4*N"},
        launch=[{"kernel": "kernel_family", "grid": ["ceil_div(N, BLOCK*ITEMS*VEC)"], "block": ["BLOCK"],
                 "shared": "0", "args": ["x", "out", "n"]}],
        reference_ms=0.9, args=["x", "out", "n"], model=_reduce_model),
    SyntheticFamily(
        name="syn_gemm", template=GEMM,
        knobs={"ALGO": ["naive", "smem", "tile2d"], "BM": [32, 64, 128], "BN": [32, 64, 128], "BK": [8, 16, 32],
               "TM": [1, 4, 8], "TN": [1, 4, 8], "VEC": [1, 4]},
        constraints=["BM*BN // (TM*TN) >= 32 and BM*BN // (TM*TN) <= 1024", "4*(BM*BK + BK*BN) <= 49152",
                     "ALGO != 'naive' or (VEC == 1 and BK == 8)"],
        sizes={"M": 4096, "N": 4096, "K": 4096}, roofline={"flops": "2*M*N*K", "bytes": "4*(M*K + K*N + M*N)"},
        launch=[{"kernel": "kernel_family", "grid": ["ceil_div(N, BN)", "ceil_div(M, BM)"],
                 "block": ["BM*BN // (TM*TN)"], "shared": "0", "args": ["A", "B", "C", "m", "n", "k"]}],
        reference_ms=95.0, args=["A", "B", "C", "m", "n", "k"], model=_gemm_model),
    SyntheticFamily(
        name="syn_transpose", template=TRANSPOSE,
        knobs={"ALGO": ["naive", "shared"], "TILE": [16, 32, 64], "ROWS": [1, 2, 4, 8], "PAD": [0, 1],
               "UNROLL": [1, 2, 4], "ORDER": ["row", "diagonal"]},
        constraints=["TILE * ROWS <= 1024", "ALGO == 'shared' or PAD == 0"],
        sizes={"R": 8192, "C": 8192}, roofline={"flops": "0", "bytes": "8*R*C"},
        launch=[{"kernel": "kernel_family", "grid": ["ceil_div(C, TILE)", "ceil_div(R, TILE)"],
                 "block": ["TILE", "TILE // ROWS"], "shared": "0", "args": ["in", "out", "rows", "cols"]}],
        reference_ms=0.25, args=["in", "out", "rows", "cols"], model=_transpose_model),
    SyntheticFamily(
        name="syn_softmax", template=SOFTMAX,
        knobs={"BLOCK": [32, 64, 128, 256, 512], "ROWS_PER_BLOCK": [1, 2, 4], "VEC": [1, 4], "UNROLL": [1, 2, 4],
               "PASS": ["two_pass", "online"], "RED": ["shared", "warp"]},
        constraints=["BLOCK * ROWS_PER_BLOCK <= 1024", "RED != 'warp' or BLOCK == 32 or ROWS_PER_BLOCK == 1"],
        sizes={"R": 16384, "C": 4096}, roofline={"flops": "5*R*C", "bytes": "8*R*C"},
        launch=[{"kernel": "kernel_family", "grid": ["ceil_div(R, ROWS_PER_BLOCK)"], "block": ["BLOCK", "ROWS_PER_BLOCK"],
                 "shared": "0", "args": ["x", "y", "rows", "cols"]}],
        reference_ms=0.6, args=["x", "y", "rows", "cols"], model=_softmax_model),
]


def render_source(family: SyntheticFamily, knobs: dict) -> str:
    lines = [f"#define {k}_{v} 1" if isinstance(v, str) else f"#define {k} {v}" for k, v in knobs.items()]
    return "\n".join(lines) + "\n" + family.template


def _substitute(expr: str, knobs: dict) -> str:
    import re

    return re.sub(r"\b([A-Z_]+)\b", lambda m: str(knobs[m.group(1)]) if m.group(1) in knobs else m.group(1), expr)


def render(family: SyntheticFamily, knobs: dict) -> dict:
    launch = [{"kernel": s["kernel"], "grid": [_substitute(g, knobs) for g in s["grid"]],
               "block": [_substitute(b, knobs) for b in s["block"]], "shared": s["shared"], "args": list(s["args"])}
              for s in family.launch]
    return {"source": render_source(family, knobs), "launch": launch, "temps": [], "compile_options": [],
            "knobs": dict(knobs), "name": ",".join(f"{k}={v}" for k, v in knobs.items())}


def reference(family: SyntheticFamily) -> dict:
    """The reference: the family's plainest variant, stripped of its defines' names."""
    knobs = {k: v[0] for k, v in family.knobs.items()}
    candidate = render(family, knobs)
    candidate["knobs"] = None
    candidate["name"] = "reference"
    return candidate


def _valid(family: SyntheticFamily, knobs: dict) -> bool:
    from klexpr import evaluate

    names = {**family.sizes, **knobs}
    return all(evaluate(c, names) for c in family.constraints)


def _compiler_facts(family: SyntheticFamily, knobs: dict) -> dict:
    per_thread = knobs.get("ITEMS", 1) * knobs.get("VEC", 1) + knobs.get("TM", 1) * knobs.get("TN", 1) * 2
    registers = min(255, 18 + 3 * per_thread + (8 if knobs.get("UNROLL", 1) >= 4 else 0))
    spills = max(0, 3 * per_thread + 18 - 255)
    shared = 0
    if "BM" in knobs and knobs.get("ALGO") != "naive":
        shared = 4 * (knobs["BM"] * knobs["BK"] + knobs["BK"] * knobs["BN"])
    if "TILE" in knobs and knobs.get("ALGO") == "shared":
        shared = 4 * knobs["TILE"] * (knobs["TILE"] + knobs["PAD"])
    return {"registers": registers, "shared_bytes": shared, "spill_stores": spills, "spill_loads": spills,
            "stack_bytes": 0, "sass": {}}


def records(family: SyntheticFamily, seed: int = 0) -> list[dict]:
    """Every valid variant of the family as a recorded line (docs/contracts.md, 'Recorded datasets')."""
    names = list(family.knobs)
    out = []
    for index, values in enumerate(itertools.product(*(family.knobs[n] for n in names))):
        knobs = dict(zip(names, values))
        if not _valid(family, knobs):
            continue
        source = render_source(family, knobs)
        digest = hashlib.sha256(source.encode()).hexdigest()
        h = int(digest[:12], 16)
        rng = random.Random(h ^ seed)
        facts = _compiler_facts(family, knobs)
        record = {"problem": family.name, "variant": f"v{index}", "knobs": knobs, "source_hash": digest,
                  "compiler": facts, "hardware": H200, "backend": "synthetic", "seed": seed,
                  "reference": {"median_ms": family.reference_ms, "iqr_ms": 0.0, "n": 20, "cv": 0.01}}
        if facts["shared_bytes"] > 48 * 1024 or rng.random() < 0.02:
            record.update(status="failed-compile", reason="ptxas error (synthetic)", speedup=None)
        elif rng.random() < 0.03:
            record.update(status="failed-correctness", reason="outputs differ (synthetic)", speedup=None)
        else:
            # Normalised so that the family's plainest variant (the reference) runs at about 1x.
            speedup = family.model(knobs, h) / family.model({k: v[0] for k, v in family.knobs.items()}, h)
            speedup *= math.exp(rng.gauss(0, 0.12))  # interactions the rules do not capture
            if facts["spill_stores"]:
                speedup *= 0.6
            speedup *= math.exp(rng.gauss(0, 0.03))  # measurement noise
            record.update(status="ok", reason="", speedup=speedup,
                          candidate={"median_ms": family.reference_ms / speedup, "iqr_ms": 0.0, "n": 20, "cv": 0.02})
        out.append(record)
    return out


def problem_dict(family: SyntheticFamily) -> dict:
    return {"name": family.name, "sizes": dict(family.sizes), "roofline": dict(family.roofline),
            "tolerance": family.tolerance}
