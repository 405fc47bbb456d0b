"""Auto-knobs on kernels QA wrote (a histogram, a tiled transpose, a warp reduction, a tiled SGEMM, a
namespaced constexpr): a constant is tied to the block only where the code counts threads with it,
a grid repeating a tile's number in any dimension is written with it, the warp size and constants
that size an argument or a data-indexed table stay as written, a comment after a #define's value is
read past, and the proposed values keep the static shared memory within what ptxas accepts."""
import pytest

from gpu_runner import Runner
from gpu_runner.auto_knobs import (MAX_STATIC_SHARED_BYTES, constraint_names, family_from_knobs, propose_knobs,
                                   split_constraints)
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.family import render_variant, valid_variants
from gpu_runner.spec import parse_problem

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")


HIST_TOML = """[problem]
name = "qa_hist"

[sizes]
default = { N = 67108864 }
odd = { N = 1000003 }

[[args]]
name = "data"
role = "input"
dtype = "uint8"
shape = ["N"]
init = "randint:0:255"
[[args]]
name = "hist"
role = "output"
dtype = "uint32"
shape = [256]
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
memset = "hist"
value = 0

[[launch]]
kernel = "histogram"
grid = [1024]
block = [256]
args = ["data", "hist", "n"]
"""

HIST = """#define NUM_BINS 256

extern "C" __global__ void histogram(const unsigned char* __restrict__ data, unsigned int* __restrict__ hist, int n) {
    __shared__ unsigned int local[NUM_BINS];
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}
"""

TRANSPOSE_TOML = """[problem]
name = "qa_transpose"

[sizes]
default = { R = 8192, C = 8192 }
odd = { R = 1000, C = 3000 }

[[args]]
name = "inp"
role = "input"
dtype = "float32"
shape = ["R", "C"]
[[args]]
name = "out"
role = "output"
dtype = "float32"
shape = ["C", "R"]
[[args]]
name = "rows"
role = "scalar"
dtype = "int32"
value = "R"
[[args]]
name = "cols"
role = "scalar"
dtype = "int32"
value = "C"

[[launch]]
kernel = "transpose"
grid = ["ceil_div(C, 32)", "ceil_div(R, 32)"]
block = [32, 8]
args = ["inp", "out", "rows", "cols"]
"""

TRANSPOSE = """#define TILE_DIM 32
#define BLOCK_ROWS 8

extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""

ROW_SUM_TOML = """[problem]
name = "qa_warpsize"

[sizes]
default = { R = 8192, C = 4096 }
odd = { R = 77, C = 1001 }

[[args]]
name = "x"
role = "input"
dtype = "float32"
shape = ["R", "C"]
[[args]]
name = "out"
role = "output"
dtype = "float32"
shape = ["R"]
[[args]]
name = "cols"
role = "scalar"
dtype = "int32"
value = "C"

[[launch]]
kernel = "row_sum"
grid = ["R"]
block = [256]
args = ["x", "out", "cols"]
"""

ROW_SUM = """#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_reduce(float v) {
    for (int off = WARP_SIZE / 2; off > 0; off /= 2) v += __shfl_down_sync(FULL_MASK, v, off);
    return v;
}

extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int cols) {
    __shared__ float partial[1024 / WARP_SIZE];
    const float* row = x + (size_t)blockIdx.x * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    s = warp_reduce(s);
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) partial[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < blockDim.x / WARP_SIZE ? partial[lane] : 0.f;
        s = warp_reduce(s);
        if (lane == 0) out[blockIdx.x] = s;
    }
}
"""

SGEMM_TOML = """[problem]
name = "qa_sgemm_nofam"

[sizes]
default = { M = 2048, N = 2048, K = 2048 }
rect = { M = 512, N = 256, K = 128 }

[[args]]
name = "A"
role = "input"
dtype = "float32"
shape = ["M", "K"]
[[args]]
name = "B"
role = "input"
dtype = "float32"
shape = ["K", "N"]
[[args]]
name = "C"
role = "output"
dtype = "float32"
shape = ["M", "N"]
[[args]]
name = "m"
role = "scalar"
dtype = "int32"
value = "M"
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"
[[args]]
name = "k"
role = "scalar"
dtype = "int32"
value = "K"

[[launch]]
kernel = "sgemm_tiled"
grid = ["ceil_div(N, 16)", "ceil_div(M, 16)"]
block = [16, 16]
args = ["A", "B", "C", "m", "n", "k"]
"""

SGEMM = """#define TILE 16  // tile edge

extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                       float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""

SCALE_TOML = """[problem]
name = "qa_nsconst"

[sizes]
default = { N = 16777216 }
odd = { N = 1000003 }

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
name = "a"
role = "scalar"
dtype = "float32"
value = "2.5"
[[args]]
name = "n"
role = "scalar"
dtype = "int32"
value = "N"

[[launch]]
kernel = "scale"
grid = ["ceil_div(N, 1024)"]
block = [256]
args = ["x", "y", "a", "n"]
"""

NAMESPACED = """namespace cfg {
constexpr int kItems = 4;   // elements per thread
}
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * cfg::kItems;
    for (int j = 0; j < cfg::kItems; ++j) if (base + j < n) y[base + j] = a * x[base + j];
}
"""


def _problem(toml: str, source: str):
    return parse_problem(toml, source)


def _family(toml: str, source: str, chosen: dict | None = None, constraints: list[str] | None = None):
    problem = _problem(toml, source)
    proposal = propose_knobs(problem)
    chosen = chosen if chosen is not None else {k.name: list(k.values) for k in proposal.knobs}
    family_toml, template = family_from_knobs(problem, chosen, constraints)
    return family_toml, parse_problem(toml + "\n" + family_toml, source, template)


# ---- 1. a constant equal to the block size of a kernel that reads blockDim ---------------------------
def test_a_histograms_bin_count_is_not_its_block_size():
    proposal = propose_knobs(_problem(HIST_TOML, HIST))
    assert proposal.knob("NUM_BINS") is None
    assert [(k.name, k.kind, k.original) for k in proposal.knobs] == [("BLOCK", "block", 256)]
    assert any(why.startswith("NUM_BINS (#define NUM_BINS at line 1) stays 256: the argument hist has 256 elements")
               for why in proposal.skipped)
    family_toml, _ = _family(HIST_TOML, HIST)
    assert 'block = ["BLOCK"]' in family_toml and "NUM_BINS" not in family_toml


def test_a_bin_count_that_sizes_a_table_indexed_by_data_stays_even_when_no_shape_repeats_it():
    toml = HIST_TOML.replace('shape = [256]', 'shape = ["BINS"]').replace("N = 67108864 }", "N = 67108864, BINS = 256 }") \
        .replace("N = 1000003 }", "N = 1000003, BINS = 256 }")
    proposal = propose_knobs(_problem(toml, HIST))
    assert proposal.knob("NUM_BINS") is None
    assert any("it sizes local, which the kernel indexes with values it reads (local[data[i]])" in why
               for why in proposal.skipped)


def test_a_length_the_kernel_walks_over_with_blockdim_strides_is_a_knob_of_its_own_not_the_block():
    # No data-dependent index and no shape repeating it: NUM_BINS is a length of its own, whatever the block.
    source = HIST.replace("atomicAdd(&local[data[i]], 1u);", "atomicAdd(&local[i % NUM_BINS], 1u);")
    toml = HIST_TOML.replace('shape = [256]', 'shape = ["BINS"]').replace("N = 67108864 }", "N = 67108864, BINS = 256 }") \
        .replace("N = 1000003 }", "N = 1000003, BINS = 256 }")
    proposal = propose_knobs(_problem(toml, source))
    assert proposal.knob("NUM_BINS").kind == "constant" and proposal.knob("BLOCK").kind == "block"


def test_a_constant_equal_to_the_block_that_the_code_does_not_show_as_a_thread_count_stays_as_written():
    source = HIST.replace("atomicAdd(&local[data[i]], 1u);", "atomicAdd(&local[i % NUM_BINS], 1u);") \
        .replace("b < NUM_BINS; b += blockDim.x) local[b] = 0;", "b < 256; b += blockDim.x) local[b] = 0;") \
        .replace("b < NUM_BINS; b += blockDim.x) atomicAdd", "b < 256; b += blockDim.x) atomicAdd")
    toml = HIST_TOML.replace('shape = [256]', 'shape = ["BINS"]').replace("N = 67108864 }", "N = 67108864, BINS = 256 }") \
        .replace("N = 1000003 }", "N = 1000003, BINS = 256 }")
    proposal = propose_knobs(_problem(toml, source))
    assert proposal.knob("NUM_BINS") is None
    assert any(why.startswith("NUM_BINS (#define NUM_BINS at line 1) stays 256: it equals the block size of histogram, "
                              "but the code does not show that it counts the block's threads") for why in proposal.skipped)


@pytest.mark.parametrize("counting", [
    "__launch_bounds__(THREADS) ",                                 # the kernel's launch bounds
    "",                                                            # a shared array of THREADS indexed by threadIdx
])
def test_a_constant_the_code_counts_threads_with_is_tied_to_the_block_of_a_kernel_that_reads_blockdim(counting):
    source = ("#define THREADS 256\n"
              f'extern "C" __global__ void {counting}scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {{\n'
              "    __shared__ float staged[THREADS];\n"
              "    int tid = threadIdx.x;\n"
              "    int i = blockIdx.x * blockDim.x + tid;\n"
              "    staged[tid] = i < n ? x[i] : 0.0f;\n"
              "    __syncthreads();\n"
              "    if (i < n) y[i] = a * staged[tid];\n"
              "}\n")
    if counting:
        source = source.replace("staged[tid]", "staged[tid % 8]")
    toml = SCALE_TOML.replace('grid = ["ceil_div(N, 1024)"]', 'grid = ["ceil_div(N, 256)"]')
    proposal = propose_knobs(_problem(toml, source))
    assert [(k.name, k.kind) for k in proposal.knobs] == [("THREADS", "block")]
    family_toml, _ = _family(toml, source)
    assert 'block = ["THREADS"]' in family_toml and 'grid = ["ceil_div(N, THREADS)"]' in family_toml


# ---- 2. a grid repeating a tile's number in another dimension ---------------------------------------
def test_a_transposes_tile_is_written_in_both_grid_dimensions():
    family_toml, spec = _family(TRANSPOSE_TOML, TRANSPOSE)
    assert 'grid = ["ceil_div(C, TILE_DIM)", "ceil_div(R, TILE_DIM)"]' in family_toml
    assert 'block = ["TILE_DIM", "BLOCK_ROWS"]' in family_toml
    launch = render_variant(spec, {"TILE_DIM": 16, "BLOCK_ROWS": 4}).launch[0]
    assert [e.text for e in launch.grid] == ["ceil_div(C, 16)", "ceil_div(R, 16)"]


def test_the_rows_a_block_covers_at_a_time_divide_the_tile():
    proposal = propose_knobs(_problem(TRANSPOSE_TOML, TRANSPOSE))
    assert "TILE_DIM % BLOCK_ROWS == 0" in proposal.constraints
    _, spec = _family(TRANSPOSE_TOML, TRANSPOSE)
    variants = valid_variants(spec)
    assert variants and all(v["TILE_DIM"] % v["BLOCK_ROWS"] == 0 for v in variants)


def test_a_grid_number_two_constants_hold_is_left_and_said():
    # TILE_DIM and an unrelated constant both hold 32: the grid's y dimension is not guessed at.
    source = "#define PAD 32\n__device__ int padded(int v) { return v + PAD; }\n" + TRANSPOSE.replace(
        "int rows, int cols) {", "int rows, int cols) {\n    (void)padded(0);")
    family_toml, _ = _family(TRANSPOSE_TOML, source, {"TILE_DIM": [16, 32], "BLOCK_ROWS": [8]})
    assert 'grid = ["ceil_div(C, TILE_DIM)", "ceil_div(R, 32)"]' in family_toml
    proposal = propose_knobs(_problem(TRANSPOSE_TOML, source))
    assert any("The grid of transpose writes 32 in dimension y, but PAD and TILE_DIM all hold 32" in why
               for why in proposal.skipped)


def test_a_square_blocks_generated_knobs_keep_to_their_own_grid_dimension():
    toml = TRANSPOSE_TOML.replace("block = [32, 8]", "block = [16, 16]").replace(
        'grid = ["ceil_div(C, 32)", "ceil_div(R, 32)"]', 'grid = ["ceil_div(C, 16)", "ceil_div(R, 16)"]')
    source = ('extern "C" __global__ void transpose(const float* in, float* out, int rows, int cols) {\n'
              "    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
              "    if (x < cols && y < rows) out[x * rows + y] = in[y * cols + x];\n}\n")
    family_toml, _ = _family(toml, source)
    assert 'grid = ["ceil_div(C, BLOCK_X)", "ceil_div(R, BLOCK_Y)"]' in family_toml


# ---- 3. the warp size ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["WARP_SIZE", "LANES"])
def test_a_warp_size_constant_is_never_offered(name):
    source = ROW_SUM.replace("WARP_SIZE", name)
    proposal = propose_knobs(_problem(ROW_SUM_TOML, source))
    assert proposal.knob(name) is None
    assert [k.name for k in proposal.knobs] == ["BLOCK"]
    assert any(why.startswith(f"{name} (#define {name} at line 1) stays 32: it is the warp size (") for why in proposal.skipped)


def test_a_tile_of_32_that_is_no_warp_size_is_still_offered():
    toml = SGEMM_TOML.replace("block = [16, 16]", "block = [32, 32]").replace("16)", "32)")
    proposal = propose_knobs(_problem(toml, SGEMM.replace("#define TILE 16", "#define TILE 32")))
    assert proposal.knob("TILE").kind == "block"


# ---- 4. a comment after a #define's value --------------------------------------------------------------
@pytest.mark.parametrize("define", ["#define TILE 16  // tile edge", "#define TILE 16 /* tile edge */",
                                    "#define TILE /* tile edge */ 16"])
def test_a_define_with_a_comment_after_its_value_is_a_knob(define):
    source = SGEMM.replace("#define TILE 16  // tile edge", define)
    proposal = propose_knobs(_problem(SGEMM_TOML, source))
    assert proposal.knob("TILE") is not None and proposal.knob("TILE").kind == "block"
    family_toml, spec = _family(SGEMM_TOML, source)
    assert 'grid = ["ceil_div(N, TILE)", "ceil_div(M, TILE)"]' in family_toml
    assert "#define TILE 16" not in render_variant(spec, valid_variants(spec)[0]).source.split("\n", 1)[1]


def test_a_define_over_two_lines_leaves_as_many_blank_lines_in_the_template():
    source = SGEMM.replace("#define TILE 16  // tile edge", "#define TILE 16 /* the tile's\n edge */")
    _, template = family_from_knobs(_problem(SGEMM_TOML, source), {"TILE": [8, 16]})
    assert template.count("\n") == source.count("\n")


# ---- 5. a constexpr in a namespace -------------------------------------------------------------------
def test_a_constexpr_declared_in_a_namespace_is_not_offered():
    proposal = propose_knobs(_problem(SCALE_TOML, NAMESPACED))
    assert proposal.knob("kItems") is None
    assert any(why.startswith("kItems (constexpr kItems at line 2) stays 4: it is declared inside namespace cfg")
               for why in proposal.skipped)


def test_a_global_constexpr_the_code_names_with_a_scope_is_not_offered():
    source = NAMESPACED.replace("namespace cfg {\nconstexpr int kItems = 4;   // elements per thread\n}",
                                "constexpr int kItems = 4;").replace("cfg::kItems", "::kItems")
    proposal = propose_knobs(_problem(SCALE_TOML, source))
    assert proposal.knob("kItems") is None
    assert any("the code names it with a scope, which a knob's #define of kItems cannot stand for (::kItems would become ::4)" in why for why in proposal.skipped)


def test_a_constexpr_in_an_anonymous_namespace_is_still_a_knob():
    source = NAMESPACED.replace("namespace cfg {", "namespace {").replace("cfg::kItems", "kItems")
    assert propose_knobs(_problem(SCALE_TOML, source)).knob("kItems").kind == "constant"


# ---- 6. static shared memory ----------------------------------------------------------------------------
def test_the_proposed_tile_sizes_keep_the_static_shared_memory_within_48_kib():
    proposal = propose_knobs(_problem(TRANSPOSE_TOML, TRANSPOSE))
    tile = proposal.knob("TILE_DIM")
    assert 128 not in tile.values and max(tile.values) == 64
    assert f"4 * TILE_DIM * (TILE_DIM + 1) <= {MAX_STATIC_SHARED_BYTES}" in proposal.constraints
    assert any(why.startswith("TILE_DIM is not proposed at 128: the shared arrays of transpose would take 66,048 bytes")
               for why in proposal.skipped)


def test_the_shared_memory_constraint_holds_over_combinations_of_knobs():
    toml = SCALE_TOML.replace('grid = ["ceil_div(N, 1024)"]', 'grid = ["ceil_div(N, 256)"]')
    source = ("#define ROWS 16\n#define COLS 64\n"
              'extern "C" __global__ void scale(const float* x, float* y, float a, int n) {\n'
              "    __shared__ double stage[ROWS][COLS / 2 + 1];\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    stage[0][0] = 0.0;\n"
              "    if (i < n) y[i] = a * x[i] + (float)stage[0][0] * ROWS * COLS;\n}\n")
    proposal = propose_knobs(_problem(toml, source))
    assert f"8 * ROWS * (COLS // 2 + 1) <= {MAX_STATIC_SHARED_BYTES}" in proposal.constraints
    _, spec = _family(toml, source)
    assert all(8 * v["ROWS"] * (v["COLS"] // 2 + 1) <= MAX_STATIC_SHARED_BYTES for v in valid_variants(spec))


@needs_nvcc
def test_the_default_proposal_for_a_transpose_compiles_at_both_ends():
    _, spec = _family(TRANSPOSE_TOML, TRANSPOSE)
    variants = valid_variants(spec)
    runner = Runner(backend="static")
    for knobs in (variants[0], variants[-1]):
        report = runner.check(spec, render_variant(spec, knobs))
        assert report.ok, (knobs, report.summary())


# ---- 7. constraints that cannot be read ----------------------------------------------------------------
@pytest.mark.parametrize("constraint, why", [
    ("-" * 5000 + "TILE_DIM <= 1024", "the expression is longer than 1000 characters"),
    ("(" * 300 + "TILE_DIM" + ")" * 300, "it is not a valid expression"),
    ("TILE_DIM\x00 <= 3", "it is not a valid expression"),
    ("TILE_DIM.x <= 3", "is not allowed"),
])
def test_a_constraint_that_cannot_be_read_is_refused_with_a_sentence(constraint, why):
    problem = _problem(TRANSPOSE_TOML, TRANSPOSE)
    assert constraint_names(constraint) == set()
    with pytest.raises(ValueError, match="cannot be read: .*" + why.split(" (")[0]):
        split_constraints(problem, {"TILE_DIM": [32]}, [constraint])
