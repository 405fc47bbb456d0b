"""Knobs found automatically in naive kernels without a [family] (issue 21): the block size, integer
constants and unroll factors, a template and launch that the spec checks accept, and variants that
compile with nvcc."""
from pathlib import Path

import pytest

from gpu_runner import Runner
from gpu_runner.auto_knobs import family_from_knobs, propose_knobs, split_constraints
from gpu_runner.compiler import ToolMissing, find_tool
from gpu_runner.family import render_variant, valid_variants
from gpu_runner.spec import SpecError, load_problem, parse_problem

OWN = Path(__file__).parent / "own_kernels"

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")


# A row softmax as QA uploaded it: one block per row whose threads count themselves with THREADS (the
# stride, the warp count of the shared array, the helpers' loops) and never read blockDim.
ROW_SOFTMAX_BLOCK_PER_ROW = """#define THREADS 256

__device__ float block_max(float v, float* red) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < THREADS / 32; ++w) v = fmaxf(v, red[w]);
    __syncthreads();
    return v;
}

__device__ float block_sum(float v, float* red) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = 0.0f;
    for (int w = 0; w < THREADS / 32; ++w) v += red[w];
    __syncthreads();
    return v;
}

extern "C" __global__ void row_softmax(const float* x, float* out, int rows, int cols) {
    __shared__ float red[THREADS / 32];
    const float* in = x + (long long)blockIdx.x * cols;
    float* result = out + (long long)blockIdx.x * cols;
    float largest = __int_as_float(0xff800000);
    for (int j = threadIdx.x; j < cols; j += THREADS) largest = fmaxf(largest, in[j]);
    largest = block_max(largest, red);
    float total = 0.0f;
    for (int j = threadIdx.x; j < cols; j += THREADS) total += __expf(in[j] - largest);
    total = block_sum(total, red);
    for (int j = threadIdx.x; j < cols; j += THREADS) result[j] = __expf(in[j] - largest) / total;
}
"""


def row_softmax_block_per_row_toml() -> str:
    """The row softmax spec with one block of 256 threads per row."""
    text = (OWN / "row_softmax" / "problem.toml").read_text()
    changed = text.replace('grid = ["ceil_div(ROWS, 128)"]\nblock = [128]', 'grid = ["ROWS"]\nblock = [256]')
    assert changed != text
    return changed


def _problem(name: str):
    return load_problem(OWN / name)


def _knobs(problem) -> dict:
    return {k.name: (k.kind, k.original, k.values) for k in propose_knobs(problem).knobs}


def _with_family(folder: str, chosen: dict | None = None):
    problem = _problem(folder)
    proposal = propose_knobs(problem)
    chosen = chosen if chosen is not None else {k.name: list(k.values) for k in proposal.knobs}
    family_toml, template = family_from_knobs(problem, chosen)
    return parse_problem((OWN / folder / "problem.toml").read_text() + "\n" + family_toml, problem.reference.source, template)


def test_an_elementwise_kernels_block_size_becomes_a_knob_of_multiples_of_32():
    knobs = _knobs(_problem("gelu"))
    assert set(knobs) == {"BLOCK"}
    kind, original, values = knobs["BLOCK"]
    assert kind == "block" and original == 256
    assert min(values) == 64 and max(values) == 1024 and all(v % 32 == 0 for v in values)


def test_a_define_and_an_unroll_factor_become_knobs_of_a_row_wise_normalisation():
    knobs = _knobs(_problem("row_rmsnorm"))
    assert knobs["CHUNK"] == ("constant", 4, (1, 2, 4, 8, 16))
    assert knobs["UNROLL"] == ("unroll", 4, (1, 2, 4, 8))
    assert knobs["BLOCK"][:2] == ("block", 128)


def test_a_constexpr_of_a_column_reduction_becomes_a_knob():
    knobs = _knobs(_problem("column_sum"))
    assert knobs["ROWS_PER_STEP"] == ("constant", 8, (2, 4, 8, 16, 32))
    assert knobs["UNROLL"][0] == "unroll"


def test_a_stencils_two_dimensional_block_gets_one_knob_per_dimension_and_a_thread_limit():
    problem = _problem("stencil3x3")
    proposal = propose_knobs(problem)
    assert {k.name for k in proposal.knobs} == {"BLOCK_X", "BLOCK_Y"}
    assert "BLOCK_X*BLOCK_Y <= 1024" in proposal.constraints
    spec = _with_family("stencil3x3")
    variants = valid_variants(spec)
    assert {"BLOCK_X": 16, "BLOCK_Y": 16} in variants
    assert all(32 <= v["BLOCK_X"] * v["BLOCK_Y"] <= 1024 for v in variants)
    launch = render_variant(spec, {"BLOCK_X": 32, "BLOCK_Y": 8}).launch[0]
    assert [e.text for e in launch.block] == ["32", "8"]
    assert [e.text for e in launch.grid] == ["ceil_div(W, 32)", "ceil_div(H, 8)"]


def test_a_block_size_the_kernel_does_not_read_from_blockdim_stays_and_says_why():
    problem = _problem("gelu")
    source = problem.reference.source.replace("blockIdx.x * blockDim.x", "blockIdx.x * 256")
    fixed = parse_problem((OWN / "gelu" / "problem.toml").read_text(), source)
    proposal = propose_knobs(fixed)
    assert proposal.knobs == []
    assert "never reads blockDim" in proposal.skipped[0]


def test_a_define_that_sizes_a_shared_array_and_the_block_is_one_knob():
    problem = _problem("gelu")
    source = ("#define THREADS 256\n" + problem.reference.source.replace(
        "if (i < n) {", "__shared__ float staged[THREADS];\n    if (i < n) {\n        staged[threadIdx.x] = 0.0f;"))
    fixed = parse_problem((OWN / "gelu" / "problem.toml").read_text(), source)
    proposal = propose_knobs(fixed)
    assert [(k.name, k.kind) for k in proposal.knobs] == [("THREADS", "block")]
    assert all(v & (v - 1) == 0 for v in proposal.knobs[0].values)  # threads that share memory: powers of two
    family_toml, _ = family_from_knobs(fixed, {"THREADS": [128, 256]})
    assert 'block = ["THREADS"]' in family_toml and "ceil_div(N, THREADS)" in family_toml


def test_a_knob_the_user_leaves_out_keeps_its_original_value():
    spec = _with_family("row_rmsnorm", {"BLOCK": [128, 256]})
    assert set(spec.family.knobs) == {"BLOCK"}
    source = render_variant(spec, {"BLOCK": 256}).source
    assert "#define CHUNK 4" in source and "#pragma unroll 4" in source


def test_values_that_are_not_positive_whole_numbers_are_refused():
    with pytest.raises(ValueError, match="positive whole number"):
        family_from_knobs(_problem("gelu"), {"BLOCK": [0, 128]})
    with pytest.raises(ValueError, match="not a knob"):
        family_from_knobs(_problem("gelu"), {"WARPS": [1]})


def test_the_derived_family_passes_the_spec_and_signature_checks_of_every_kernel():
    for folder in ("gelu", "row_rmsnorm", "column_sum", "stencil3x3"):
        spec = _with_family(folder)
        assert valid_variants(spec), folder


def test_a_family_whose_launch_does_not_fit_the_kernel_is_refused_by_the_spec_check():
    problem = _problem("gelu")
    family_toml, template = family_from_knobs(problem, {"BLOCK": [128]})
    with pytest.raises(SpecError):
        parse_problem((OWN / "gelu" / "problem.toml").read_text() + "\n" + family_toml,
                      problem.reference.source, template.replace("int n)", "int n, int m)"))


@needs_nvcc
@pytest.mark.parametrize("folder", ["gelu", "row_rmsnorm", "column_sum", "stencil3x3"])
def test_the_smallest_and_largest_variants_compile_with_nvcc(folder):
    spec = _with_family(folder)
    variants = valid_variants(spec)
    runner = Runner(backend="static")
    for knobs in (variants[0], variants[-1]):
        report = runner.check(spec, render_variant(spec, knobs))
        assert report.ok, (knobs, report.summary())


def _row_softmax(source: str = ROW_SOFTMAX_BLOCK_PER_ROW):
    return parse_problem(row_softmax_block_per_row_toml(), source)


def test_a_thread_count_define_of_a_kernel_that_never_reads_blockdim_is_its_block_size_knob():
    problem = _row_softmax()
    proposal = propose_knobs(problem)
    assert [(k.name, k.kind, k.original) for k in proposal.knobs] == [("THREADS", "block", 256)]
    assert proposal.knobs[0].values == (64, 128, 256, 512, 1024)  # threads that share memory: powers of two
    assert "THREADS <= 1024" in proposal.constraints
    assert not any("stays" in why for why in proposal.skipped)
    family_toml, template = family_from_knobs(problem, {"THREADS": [64, 256, 1024]})
    assert 'block = ["THREADS"]' in family_toml and 'grid = ["ROWS"]' in family_toml
    spec = parse_problem(row_softmax_block_per_row_toml() + "\n" + family_toml, problem.reference.source, template)
    small = render_variant(spec, {"THREADS": 64})
    assert small.source.startswith("#define THREADS 64\n") and "#define THREADS 256" not in small.source
    assert [e.text for e in small.launch[0].block] == ["64"]  # the block follows the thread count


@needs_nvcc
def test_the_smallest_and_largest_thread_counts_of_the_row_softmax_compile_with_nvcc():
    problem = _row_softmax()
    family_toml, template = family_from_knobs(problem, {"THREADS": [64, 1024]})
    spec = parse_problem(row_softmax_block_per_row_toml() + "\n" + family_toml, problem.reference.source, template)
    for threads in (64, 1024):
        report = Runner(backend="static").check(spec, render_variant(spec, {"THREADS": threads}))
        assert report.ok, (threads, report.summary())


def test_a_constant_equal_to_a_block_size_that_cannot_change_is_not_offered_alone():
    # The kernel writes the number 256 itself as well, so the block stays, and THREADS with it.
    source = ROW_SOFTMAX_BLOCK_PER_ROW.replace("__shared__ float red[THREADS / 32];", "__shared__ float red[256 / 32];")
    proposal = propose_knobs(_row_softmax(source))
    assert proposal.knob("THREADS") is None
    assert any(why.startswith("THREADS (#define THREADS at line 1) stays 256: it equals the block size of row_softmax")
               for why in proposal.skipped)
    assert any("The block size of row_softmax stays (256)" in why for why in proposal.skipped)
    # A constant the kernel does not use is not its thread count and stays a free knob.
    unrelated = "#define UNUSED 256\n" + ROW_SOFTMAX_BLOCK_PER_ROW
    proposal = propose_knobs(_row_softmax(unrelated))
    assert proposal.knob("THREADS").kind == "block" and proposal.knob("UNUSED").kind == "constant"


def test_a_constraint_naming_something_that_is_no_knob_nor_size_is_refused():
    problem = _problem("gelu")
    with pytest.raises(ValueError, match=r"names BLOKC, which is neither a knob of this kernel \(BLOCK\) nor a size \(N\)"):
        family_from_knobs(problem, {"BLOCK": [128, 256]}, ["BLOKC <= 256"])
    rmsnorm = _problem("row_rmsnorm")
    kept, dropped = split_constraints(rmsnorm, {"BLOCK": [128]}, ["BLOCK <= 512", "CHUNK*BLOCK <= 4096", "ceil_div(ROWS, BLOCK) >= 1"])
    assert kept == ["BLOCK <= 512", "ceil_div(ROWS, BLOCK) >= 1"] and dropped == ["CHUNK*BLOCK <= 4096"]


def test_knobs_with_too_many_combinations_are_refused_before_anything_else():
    from gpu_runner.family import MAX_COMBINATIONS

    problem = _problem("row_rmsnorm")
    values = list(range(1, 33))
    # Counted before the kernel is even read, so names it does not offer are not reached yet.
    too_many = {"BLOCK": values, "CHUNK": values, "UNROLL": values, "NOT_A_KNOB": values, "ANOTHER": values}
    with pytest.raises(SpecError, match=f"33,554,432 combinations .*more than the {MAX_COMBINATIONS:,}"):
        family_from_knobs(problem, too_many)
