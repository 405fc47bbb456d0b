"""The static backend on real nvcc output (no GPU needed)."""
import pytest

from gpu_runner import Runner
from gpu_runner.compiler import ToolMissing, find_tool, parse_ptxas, parse_sass
from tests.gpu_runner.helpers import candidate, saxpy_problem

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False

needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed here")

SPILLER = """
extern "C" __global__ void spill(const float* x, const float* y, float* out, float a, int n) {
    float local[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (int k = 0; k < 256; ++k) local[(k * 7 + i) & 255] = x[(i + k) % n];
    if (i < n) out[i] = local[i & 255] * a + y[i];
}
"""


@needs_nvcc
def test_a_compile_error_comes_back_with_its_line_number():
    problem = saxpy_problem()
    source = 'extern "C" __global__ void saxpy(const float* x, const float* y, float* out, float a, int n) {\n' \
             "    int i = blockIdx.x * blockDim.x + threadIdx.x\n    out[i] = x[i];\n}\n"
    result = Runner("static").measure(problem, candidate(source, "saxpy"))
    assert result.status == "failed-compile"
    assert "line 3" in result.reason and "expected a \";\"" in result.reason
    report = Runner("static").check(problem, candidate(source, "saxpy"))
    assert not report.ok and report.errors[0].line == 3


@needs_nvcc
def test_it_reports_registers_spills_stack_and_sass_counts_for_sm_90():
    problem = saxpy_problem()
    result = Runner("static").measure(problem, candidate(SPILLER, "spill"))
    assert result.status == "unavailable" and "cannot run" in result.reason
    facts = result.compiler
    assert facts.registers and facts.registers > 0
    assert facts.stack_bytes >= 1024            # the 1 KiB local array lives on the stack
    assert any(op.startswith("STL") for op in facts.sass)
    assert any(op.startswith("LDG") for op in facts.sass)
    assert facts.kernels["spill"]["registers"] == facts.registers


@needs_nvcc
def test_vectorised_variant_shows_16_byte_loads_in_its_sass():
    from gpu_runner import render_variant

    problem = saxpy_problem()
    wide = Runner("static").check(problem, render_variant(problem, {"BLOCK": 256, "ITEMS": 1, "VEC": 4}))
    narrow = Runner("static").check(problem, render_variant(problem, {"BLOCK": 256, "ITEMS": 1, "VEC": 1}))
    assert any(".128" in op and op.startswith("LDG") for op in wide.facts.sass)
    assert not any(".128" in op for op in narrow.facts.sass)


@needs_nvcc
def test_a_kernel_missing_from_the_module_is_named():
    problem = saxpy_problem()
    source = "__global__ void saxpy(const float* x, const float* y, float* out, float a, int n) {}\n"
    result = Runner("static").measure(problem, candidate(source, "saxpy"))
    assert result.status == "failed-compile" and "extern \"C\"" in result.reason


HUNGRY = """
extern "C" __global__ void hungry(const float* x, const float* y, float* out, float a, int n) {
    float acc[48];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = x[(i + k * 97) % n];
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int k = 0; k < 48; ++k) acc[k] = acc[k] * a + acc[(k + 1) % 48];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 48; ++k) s += acc[k];
    if (i < n) out[i] = s + y[i];
}
"""


@needs_nvcc
def test_maxrregcount_reaches_ptxas():
    from gpu_runner import Candidate

    problem = saxpy_problem()
    base = candidate(HUNGRY, "hungry")
    capped = Candidate(source=HUNGRY, launch=base.launch, compile_options=("-maxrregcount=32",), name="capped")
    assert Runner("static").check(problem, base).facts.registers > 32
    assert Runner("static").check(problem, capped).facts.registers <= 32


def test_the_ptxas_and_sass_parsers_read_their_formats():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    1032 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]
"""
    facts = parse_ptxas(log)
    assert (facts.registers, facts.shared_bytes, facts.stack_bytes, facts.spill_stores, facts.spill_loads) == \
        (40, 4096, 1032, 8, 4)
    dump = """	code for sm_90
		Function : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;
        /*0030*/                   EXIT ;
"""
    assert parse_sass(dump) == {"k": {"LDC": 1, "LDG.E.128": 2, "EXIT": 1}}


def test_a_forbidden_construct_is_rejected_before_compiling():
    problem = saxpy_problem()
    source = ('extern "C" __global__ void child(float* out) { out[0] = 1; }\n'
              'extern "C" __global__ void saxpy(const float* x, const float* y, float* out, float a, int n) {\n'
              '    child<<<1, 1>>>(out);\n}\n')
    result = Runner("static").measure(problem, candidate(source, "saxpy"))
    assert result.status == "rejected-guard" and "line 3" in result.reason and "escapes the timer" in result.reason
