"""Knobs found automatically in naive kernels without a [family] (issue 21): the block size, integer
constants and unroll factors, a template and launch that the spec checks accept, and variants that
compile with nvcc."""
from pathlib import Path

import pytest

from gpu_runner import Runner
from gpu_runner.auto_knobs import family_from_knobs, propose_knobs
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
