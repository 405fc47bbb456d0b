"""Auto-knobs on kernels of QA's fourth round: a block size whose number a temp's shape or a scalar's
value also writes stays as written (a knob changes the launch, never the arguments), a constexpr that a
`#pragma unroll` names is read there through a C++ constant (nvcc does not expand a #define in the
pragma), and a kernel reads blockDim where a device helper it calls does, a template's included."""
import re

import pytest

from gpu_runner import Runner
from gpu_runner.auto_knobs import family_from_knobs, propose_knobs, template_prelude_lines
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.family import render_variant, valid_variants
from gpu_runner.spec import KernelLaunch, parse_problem
from tests.gpu_runner.test_auto_knobs_qa import SGEMM_TOML

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")


# ---- a two-pass sum: the partials' count is written in a temp and a scalar as well as the grid --------
TWO_PASS_TOML = """[problem]
name = "qa_rowsum2"

[sizes]
default = { N = 8388608 }
odd = { N = 100003 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]
init = "randint:-3:3"
[[args]]
name = "partials"
role = "temp"
dtype = "float32"
shape = ["ceil_div(N, 256)"]
[[args]]
name = "out"
role = "output"
dtype = "float32"
shape = [1]
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"
[[args]]
name = "nb"
role = "scalar"
dtype = "int32"
value = "ceil_div(N, 256)"

[[launch]]
kernel = "partial_sum"
grid = ["ceil_div(N, 256)"]
block = [256]
shared = "256*4"
args = ["x", "partials", "n"]
[[launch]]
kernel = "final_sum"
grid = [1]
block = [1024]
args = ["partials", "out", "nb"]
"""

FINAL_SUM = """
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}
extern "C" __global__ void final_sum(const float* __restrict__ partials, float* __restrict__ out, int nb) {
    __shared__ float w[32];
    float v = 0.f;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) v += partials[i];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) w[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = w[threadIdx.x];
        v = warp_sum(v);
        if (threadIdx.x == 0) out[0] = v;
    }
}
"""

# The first pass reads blockDim, as QA's kernel does.
TWO_PASS = """#include <cuda_runtime.h>
extern "C" __global__ void partial_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    extern __shared__ float s[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) s[threadIdx.x] += s[threadIdx.x + st];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}
""" + FINAL_SUM

# The first pass counts its threads with THREADS and never reads blockDim.
TWO_PASS_THREADS = """#define THREADS 256
extern "C" __global__ void partial_sum(const float* __restrict__ x, float* __restrict__ partials, int n) {
    __shared__ float s[THREADS];
    int i = blockIdx.x * THREADS + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    for (int st = THREADS / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) s[threadIdx.x] += s[threadIdx.x + st];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = s[0];
}
""" + FINAL_SUM

BLOCK_MAX_TOML = """[problem]
name = "qa_block_max"

[sizes]
default = { N = 1048576 }
odd = { N = 1000 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]
[[args]]
name = "maxes"
role = "output"
dtype = "float32"
shape = ["ceil_div(N, 256)"]
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
kernel = "block_max"
grid = ["ceil_div(N, 256)"]
block = [256]
args = ["x", "maxes", "n"]
"""

BLOCK_MAX = """extern "C" __global__ void block_max(const float* __restrict__ x, float* __restrict__ maxes, int n) {
    __shared__ float s[1024];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : -3.0e38f;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + st]);
        __syncthreads();
    }
    if (threadIdx.x == 0) maxes[blockIdx.x] = s[0];
}
"""


def _family(toml: str, source: str, chosen: dict | None = None):
    problem = parse_problem(toml, source)
    proposal = propose_knobs(problem)
    chosen = chosen if chosen is not None else {k.name: list(k.values) for k in proposal.knobs}
    family_toml, template = family_from_knobs(problem, chosen)
    return family_toml, template, parse_problem(toml + "\n" + family_toml, source, template)


def test_a_block_size_a_temp_and_a_scalar_also_write_stays_and_the_page_says_why():
    proposal = propose_knobs(parse_problem(TWO_PASS_TOML, TWO_PASS))
    assert not any("partial_sum" in k.where for k in proposal.knobs)
    assert ("The block size 256 of partial_sum stays as written: 256 is also written in the shape of the temp "
            "partials ([ceil_div(N, 256)]) and the value of the scalar nb (ceil_div(N, 256)), which a knob cannot "
            "change, so a variant with another block size could no longer match them.") in proposal.skipped


def test_every_variant_of_a_two_pass_sum_launches_as_many_blocks_as_the_temp_has_partials():
    family_toml, _, spec = _family(TWO_PASS_TOML, TWO_PASS)
    assert 'grid = ["ceil_div(N, 256)"]' in family_toml and 'shared = "256*4"' in family_toml
    partials = next(a for a in spec.args if a.name == "partials")
    nb = next(a for a in spec.args if a.name == "nb")
    variants = valid_variants(spec)
    assert variants
    for knobs in variants:
        first = next(s for s in render_variant(spec, knobs).launch if isinstance(s, KernelLaunch))
        assert first.kernel == "partial_sum"
        for case in spec.sizes:
            grid, block, _ = first.resolve(case.sizes)
            assert grid[0] == partials.numel(case.sizes) == nb.value.evaluate_int(case.sizes), (knobs, case.name)
            assert block[0] == 256, (knobs, case.name)


def test_a_thread_count_constant_whose_number_a_temp_also_writes_is_not_the_block_knob():
    proposal = propose_knobs(parse_problem(TWO_PASS_TOML, TWO_PASS_THREADS))
    assert proposal.knob("THREADS") is None
    assert not any("partial_sum" in k.where for k in proposal.knobs)
    assert ("THREADS (#define THREADS at line 1) stays 256: 256 is also written in the shape of the temp partials "
            "([ceil_div(N, 256)]) and the value of the scalar nb (ceil_div(N, 256)), which a knob cannot change, so "
            "THREADS changed alone could no longer match them.") in proposal.skipped
    family_toml, template, _ = _family(TWO_PASS_TOML, TWO_PASS_THREADS)
    assert 'grid = ["ceil_div(N, 256)"]' in family_toml and template.startswith("#define THREADS 256\n")


def test_a_block_size_an_outputs_shape_expression_writes_stays():
    proposal = propose_knobs(parse_problem(BLOCK_MAX_TOML, BLOCK_MAX))
    assert proposal.knobs == []
    assert proposal.skipped == [
        "The block size 256 of block_max stays as written: 256 is also written in the shape of the output maxes "
        "([ceil_div(N, 256)]), which a knob cannot change, so a variant with another block size could no longer "
        "match it."]


# ---- a constexpr that a #pragma unroll names -----------------------------------------------------------
# test_auto_knobs_qa's tiled matmul spec, launching this file's kernel.
TILED_MM_TOML = SGEMM_TOML.replace('name = "qa_sgemm_nofam"', 'name = "qa_tiled_mm"').replace(
    'kernel = "sgemm_tiled"', 'kernel = "mm_tiled"')

TILED_MM = """#include <cuda_runtime.h>
#define TILE 16
constexpr int UNROLL = 4;

extern "C" __global__ void mm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                    int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < M && t + threadIdx.x < K) ? A[row * K + t + threadIdx.x] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < K) ? B[(t + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
#pragma unroll UNROLL
        for (int kk = 0; kk < TILE; ++kk) acc += As[threadIdx.y][kk] * Bs[kk][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def test_a_constexpr_a_pragma_unroll_names_is_read_there_through_a_cpp_constant():
    _, template, _ = _family(TILED_MM_TOML, TILED_MM, {"UNROLL": [1, 2, 4, 8]})
    lines = template.split("\n")
    assert lines[0] == "constexpr int UNROLL_factor = UNROLL;"
    assert "#pragma unroll UNROLL_factor" in lines
    assert not re.search(r"#pragma unroll UNROLL\b(?!_)", template)
    assert len(lines) == len(TILED_MM.split("\n")) + 1
    problem = parse_problem(TILED_MM_TOML, TILED_MM)
    assert template_prelude_lines(problem, {"UNROLL": [4], "TILE": [16]}) == 1
    assert template_prelude_lines(problem, {"TILE": [16]}) == 0


def test_only_the_pragmas_factor_is_rewritten_not_its_comment():
    source = TILED_MM.replace("#pragma unroll UNROLL\n", "#pragma unroll (UNROLL)  // UNROLL ways\n")
    _, template, _ = _family(TILED_MM_TOML, source, {"UNROLL": [2, 4]})
    assert "#pragma unroll (UNROLL_factor)  // UNROLL ways\n" in template
    assert template.startswith("constexpr int UNROLL_factor = UNROLL;\n")


def test_a_constexpr_a_pragma_names_stays_where_the_name_of_its_cpp_constant_is_taken():
    source = TILED_MM.replace("    float acc = 0.f;\n", "    float acc = 0.f, UNROLL_factor = 0.f;\n")
    proposal = propose_knobs(parse_problem(TILED_MM_TOML, source))
    assert proposal.knob("UNROLL") is None
    assert ("UNROLL (constexpr UNROLL at line 3) stays 4: the #pragma unroll at line 16 names it, where nvcc does "
            "not expand a #define, and the C++ constant the template would put there, UNROLL_factor, is a name the "
            "kernel already uses.") in proposal.skipped


@needs_nvcc
def test_every_unroll_of_a_constexpr_a_pragma_names_compiles_with_nvcc():
    _, _, spec = _family(TILED_MM_TOML, TILED_MM, {"UNROLL": [1, 2, 4, 8, 16], "TILE": [16]})
    runner = Runner(backend="static")
    for knobs in valid_variants(spec):
        report = runner.check(spec, render_variant(spec, knobs))
        assert report.ok, (knobs, report.summary())


# ---- blockDim read by a helper the kernel calls ---------------------------------------------------------
TEMPLATED_RELU_TOML = """[problem]
name = "qa_tmpl_relu"

[sizes]
default = { N = 4194304 }
small = { N = 1000 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["N"]
[[args]]
name = "y"
role = "output"
dtype = "float32"
shape = ["N"]
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
kernel = "relu_f32"
grid = ["ceil_div(N, 128*4)"]
block = [128]
args = ["x", "y", "n"]
"""

TEMPLATED_RELU = """#include <cuda_fp16.h>
#include <type_traits>

template <typename T, int ITEMS>
__device__ __forceinline__ void relu_body(const T* __restrict__ x, T* __restrict__ y, int n) {
    int base = (blockIdx.x * blockDim.x) * ITEMS + threadIdx.x;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        int i = base + j * blockDim.x;
        if (i < n) { T v = x[i]; y[i] = v > T(0) ? v : T(0); }
    }
}

template <typename T, int ITEMS>
__global__ void relu_t(const T* __restrict__ x, T* __restrict__ y, int n) { relu_body<T, ITEMS>(x, y, n); }

extern "C" __global__ void relu_f32(const float* __restrict__ x, float* __restrict__ y, int n) {
    static_assert(std::is_same<float, float>::value, "ok");
    relu_body<float, 4>(x, y, n);
}
"""

SCOPED_RELU = """namespace ops {
__device__ void relu_at(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}
}

extern "C" __global__ void relu_f32(const float* __restrict__ x, float* __restrict__ y, int n) {
    ops::relu_at(x, y, n);
}
"""


def test_a_kernel_whose_template_helper_reads_blockdim_gets_a_block_knob_its_grid_follows():
    proposal = propose_knobs(parse_problem(TEMPLATED_RELU_TOML, TEMPLATED_RELU))
    assert not any("never reads blockDim" in why for why in proposal.skipped)
    assert [(k.name, k.kind, k.original) for k in proposal.knobs] == [("BLOCK", "block", 128)]
    family_toml, _, spec = _family(TEMPLATED_RELU_TOML, TEMPLATED_RELU)
    assert 'grid = ["ceil_div(N, BLOCK * 4)"]' in family_toml
    # Each block covers BLOCK * 4 elements (relu_body<float, 4> over blockDim.x threads): the grid covers N, no more.
    for knobs in valid_variants(spec):
        step = render_variant(spec, knobs).launch[0]
        for case in spec.sizes:
            grid, block, _ = step.resolve(case.sizes)
            assert block[0] == knobs["BLOCK"]
            assert (grid[0] - 1) * block[0] * 4 < case.sizes["N"] <= grid[0] * block[0] * 4, (knobs, case.name)


def test_a_kernel_whose_scoped_helper_reads_blockdim_gets_a_block_knob():
    toml = TEMPLATED_RELU_TOML.replace('grid = ["ceil_div(N, 128*4)"]', 'grid = ["ceil_div(N, 128)"]')
    proposal = propose_knobs(parse_problem(toml, SCOPED_RELU))
    assert not any("never reads blockDim" in why for why in proposal.skipped)
    assert [(k.name, k.kind, k.original) for k in proposal.knobs] == [("BLOCK", "block", 128)]
