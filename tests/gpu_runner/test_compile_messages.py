"""What a failed compile tells its author (QA round b): ptxas's own errors, errors inside headers on the
line of the submitted file that led to them, collapsed; compile options: the allowed ones, and every
refused one named with the field it came from."""
from __future__ import annotations

import shutil

import pytest

from gpu_runner import compiler
from gpu_runner import candidate as candidates
from gpu_runner.candidate import Candidate, nvcc_options, nvrtc_options, reference_candidate
from gpu_runner.compiler import compile_cubin, parse_diagnostics, redact_foreign
from gpu_runner.cutlass_headers import cutlass_include_dir
from gpu_runner.spec import SpecError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not compiler._wheel_bins(),
                                reason="nvcc is not installed")
needs_cutlass = pytest.mark.skipif(cutlass_include_dir() is None, reason="the nvidia-cutlass wheel is not installed")


@pytest.fixture(autouse=True)
def _auto_engine(monkeypatch, tmp_path):
    monkeypatch.delenv("KERNELLAB_COMPILE_ENGINE", raising=False)
    monkeypatch.setenv("KERNELLAB_CACHE", str(tmp_path / "cache"))


WGMMA_ON_SM90 = """extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
PTX_TYPO = """extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    __shared__ float s[256];
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneidd;" : "=r"(lane));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = a * s[threadIdx.x] + 0.f * lane;
}
"""
REDUCE_A_STRUCT = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

struct Pair { float a; float b; };

extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(cg::this_thread_block());
    Pair p{a, a};
    Pair r = cg::reduce(warp, p, cg::plus<Pair>());
    if (i < n) y[i] = r.a * x[i];
}
"""
CUTE_BAD_FRAGMENTS = """#include <cute/tensor.hpp>
using namespace cute;

extern "C" __global__ void bad_gemm(float* C) {
    auto mma = make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{}, Layout<Shape<_2, _2, _1>>{});
    Tensor t4 = make_tensor<float>(Shape<_4>{});
    Tensor t8 = make_tensor<float>(Shape<_8, _2>{});
    gemm(mma, t4, t4, t8);
    C[threadIdx.x] = t8(0);
}
"""


# --- 1. ptxas's errors -------------------------------------------------------------------------------
def test_a_ptxas_error_with_a_ptx_line_is_shown_on_the_inline_ptx_line_with_a_hint():
    log = ("ptxas application ptx input, line 33; error   : Instruction 'wgmma.fence' not supported on .target "
           "'sm_90'\nptxas fatal   : Ptx assembly aborted due to errors\n")
    (error,) = parse_diagnostics(log, source=WGMMA_ON_SM90)
    assert error.line == 2 and error.severity == "error"
    assert "Instruction 'wgmma.fence' not supported on .target 'sm_90'" in error.message
    assert "line 33 of the PTX" in error.message and '"-arch=sm_90a"' in error.message
    # without the source there is no line to give, but the error is still ptxas's own
    (error,) = parse_diagnostics(log)
    assert error.line is None and "wgmma.fence" in error.message


def test_nvccs_ptxas_errors_name_each_problem_and_only_a_unique_inline_ptx_line():
    log = ("ptxas tmpxft_00000002_00000000-6_kernel.ptx, line 35; error   : Arguments mismatch for instruction 'mov'\n"
           "ptxas tmpxft_00000002_00000000-6_kernel.ptx, line 35; error   : Unknown symbol '%laneidd'\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    errors = parse_diagnostics(log, source=PTX_TYPO)
    assert [(e.line, e.message.split(" (")[0]) for e in errors] == [
        (4, "ptxas: Arguments mismatch for instruction 'mov'"), (4, "ptxas: Unknown symbol '%laneidd'")]
    # 'mov' in two lines of inline PTX: no line is guessed
    twice = PTX_TYPO.replace("    unsigned lane;\n", '    unsigned lane; asm volatile("mov.u32 %0, 1;" : "=r"(lane));\n')
    assert parse_diagnostics(log, source=twice)[0].line is None


@needs_nvcc
def test_compiling_wgmma_for_sm90_says_which_instruction_and_that_sm90a_compiles_it():
    report = compile_cubin(WGMMA_ON_SM90, sass=False, use_cache=False).report
    assert not report.ok
    assert any(e.line == 2 and "wgmma.fence" in e.message and "sm_90a" in e.message for e in report.errors), \
        report.errors
    assert not any("aborted" in e.message for e in report.errors)
    assert compile_cubin(WGMMA_ON_SM90, ["-arch=sm_90a"], sass=False, use_cache=False).report.ok


@needs_nvcc
def test_a_typo_in_inline_ptx_is_shown_on_its_line():
    report = compile_cubin(PTX_TYPO, sass=False, use_cache=False).report
    assert not report.ok and report.compiler.startswith("nvcc")   # __shared__: nvcc
    assert any(e.line == 4 and "%laneidd" in e.message for e in report.errors), report.errors


# --- 2. errors inside headers --------------------------------------------------------------------------
def _header_log(header: str) -> str:
    return (f"{header}(39): error: no operator \"+\" matches these operands\n"
            "            operand types are: const Pair + const Pair\n"
            "      return __x + __y;\n"
            "                 ^\n"
            f"{header}(12): note #3322-D: function \"operator+(const Thing &)\" does not match\n"
            "  Thing operator+(const Thing &h);\n"
            "        ^\n"
            "          detected during:\n"
            f"            instantiation of \"_Tp plus<_Tp>::operator()(const _Tp &) const [with _Tp=Pair]\" "
            f"at line 68 of {header}\n"
            "            instantiation of \"auto reduce(const TyGroup &, TyVal &&, TyFn &&) [with TyVal=Pair &]\" "
            "at line 11 of kernel.cu\n"
            "\n"
            f"{header}(39): error: no operator \"+\" matches these operands\n"
            "            operand types are: const Pair + const Pair\n"
            "      return __x + __y;\n"
            "                 ^\n"
            "          detected during instantiation of \"auto reduce(const TyGroup &, TyVal &&, TyFn &&)\" "
            "at line 11 of kernel.cu\n"
            "\n"
            "2 errors detected in the compilation of \"kernel.cu\".\n")


def test_an_error_in_a_served_header_keeps_its_message_and_lands_on_the_users_line(tmp_path, monkeypatch):
    (tmp_path / "mylib").mkdir()
    monkeypatch.setenv("KERNELLAB_INCLUDE_DIR", str(tmp_path))
    header = str(tmp_path.resolve() / "mylib" / "functional.h")
    log = _header_log(header)
    (error,) = parse_diagnostics(log)
    assert error.line == 11
    assert error.message.startswith("in an included header <mylib/functional.h> (instantiated from this line): ")
    assert 'no operator "+" matches these operands (operand types are: const Pair + const Pair)' in error.message
    assert error.message.endswith("(reported 2 times)")
    redacted = redact_foreign(log)
    assert str(tmp_path) not in redacted
    assert '<mylib/functional.h>(39): error: no operator "+" matches these operands' in redacted
    assert "at line 11 of kernel.cu" in redacted and "at line 68 of <mylib/functional.h>" in redacted
    assert parse_diagnostics(redacted) == [error]   # the stored (redacted) log reads the same


def test_an_error_in_any_other_file_quotes_nothing_of_it_but_keeps_the_users_line():
    secret = "kl_secret_7f3a9c"
    log = _header_log("/srv/data/secret.h").replace("Thing", secret).replace("_Tp=Pair", f"_Tp={secret}")
    redacted = redact_foreign(log)
    assert secret not in redacted and "/srv/data" not in redacted
    assert 'an included header: error: no operator "…" matches these operands' in redacted
    errors = parse_diagnostics(log)
    assert [e.line for e in errors] == [11]
    assert all(secret not in e.message for e in errors)
    assert parse_diagnostics(redacted) == errors


@needs_nvcc
def test_a_reduce_of_a_struct_names_the_operator_and_the_operands_on_the_users_line():
    report = compile_cubin(REDUCE_A_STRUCT, sass=False, use_cache=False).report
    assert not report.ok
    (error,) = report.errors
    assert error.line == 11
    assert 'no operator "+" matches these operands' in error.message and "const Pair + const Pair" in error.message
    assert "/usr/" not in report.log and "/cccl/" not in report.log.replace("<cuda/", "")


@needs_cutlass
@needs_nvcc
def test_cutes_static_assertions_land_on_the_users_call_collapsed_and_say_which():
    report = compile_cubin(CUTE_BAD_FRAGMENTS, sass=False, use_cache=False).report
    assert not report.ok
    errors = report.errors
    assert errors and all(e.line == 8 for e in errors), errors
    assert len(errors) < 5 and any("reported" in e.message for e in errors)
    assert any("static assertion failed" in e.message and "static_assert(" in e.message for e in errors)
    assert str(cutlass_include_dir()) not in report.log and "<cute/" in report.log


# --- 3. compile options ---------------------------------------------------------------------------------
@pytest.mark.parametrize("options, nvrtc, nvcc", [
    (["-O3"], [], []),
    (["-maxrregcount", "64"], ["--maxrregcount=64"], ["-maxrregcount=64"]),
    (["--maxrregcount=64"], ["--maxrregcount=64"], ["-maxrregcount=64"]),
    (["-maxrregcount 64"], ["--maxrregcount=64"], ["-maxrregcount=64"]),
    (["-DTILE=(16)"], ["-DTILE=(16)"], ["-DTILE=(16)"]),
    (["-D", "N=2*(3+1)"], ["-DN=2*(3+1)"], ["-DN=2*(3+1)"]),
    (["--extended-lambda"], [], ["--extended-lambda"]),
    (["--expt-extended-lambda"], [], ["--extended-lambda"]),
    (["--expt-relaxed-constexpr"], ["--expt-relaxed-constexpr"], ["--expt-relaxed-constexpr"]),
    (["-Xptxas", "-v"], ["--ptxas-options=-v"], ["--ptxas-options=-v"]),
    (["-Xptxas=-v,-dlcm=cg"], ["--ptxas-options=-v", "--ptxas-options=-dlcm=cg"],
     ["--ptxas-options=-v", "--ptxas-options=-dlcm=cg"]),
    (["-arch=sm_90a"], ["--gpu-architecture=sm_90a"], []),
])
def test_the_options_a_kernel_engineer_needs_are_allowed(options, nvrtc, nvcc):
    assert candidates.check_compile_options(options, "problem.compile_options") == options
    assert nvrtc_options(options) == nvrtc and nvcc_options(options) == nvcc


def test_every_refused_option_is_named_with_the_field_it_came_from_and_why():
    options = ["-O3", "-arch=sm_90", "-o", "/etc/passwd", "-I/etc", "-Xcompiler", "-fopenmp", "-DX=$(id)",
               "-ccbin=/bin/sh", "--include-path=/etc", "-G"]
    with pytest.raises(SpecError) as info:
        candidates.check_compile_options(options, "family.compile_options")
    error = info.value
    assert error.field == "family.compile_options"
    assert error.message.startswith("8 options are not allowed")
    for refused in ("'-arch=sm_90'", "'-o /etc/passwd'", "'-I/etc'", "'-Xcompiler -fopenmp'", "'-DX=$(id)'",
                    "'-ccbin=/bin/sh'", "'--include-path=/etc'", "'-G'"):
        assert refused in error.message
    assert "'-O3'" not in error.message
    assert "sets the architecture itself" in error.message and "-arch=sm_NNa" in error.message
    assert "names a file" in error.message and "host compiler" in error.message
    assert "docs/spec.md" in error.message
    for injection in ('-DX="a"', "-DX=`id`", "-DX=a b", "-DX=a,b", "-DX=a\\b", "-arch=sm_90a -I/etc"):
        with pytest.raises(SpecError):
            candidates.check_compile_options([injection], "problem.compile_options")


def test_the_reference_and_a_family_variant_name_their_own_field(saxpy_problem_with_options):
    problem = saxpy_problem_with_options
    reference = reference_candidate(problem)
    assert candidates.options_field(problem, reference) == "problem.compile_options"
    with pytest.raises(SpecError) as info:
        candidates.check_candidate(problem, reference)
    assert info.value.field == "problem.compile_options"
    other = Candidate(source=reference.source, launch=reference.launch, compile_options=("-G",), name="mine")
    assert candidates.options_field(problem, other) == "candidate.compile_options"
    from dataclasses import replace
    from types import SimpleNamespace

    with_family = SimpleNamespace(reference=problem.reference, family=SimpleNamespace(compile_options=("-G",)))
    variant = replace(other, knobs={"BLOCK": 128}, name="BLOCK=128")
    assert candidates.options_field(with_family, variant) == "family.compile_options"


@pytest.fixture
def saxpy_problem_with_options():
    from dataclasses import replace

    from tests.gpu_runner.test_spec import saxpy_problem

    problem = saxpy_problem()
    return replace(problem, reference=replace(problem.reference, compile_options=("-G",)))


@needs_nvcc
def test_extended_lambdas_compile_with_nvcc():
    source = ("template <class F> __device__ float apply(F f, float v) { return f(v); }\n"
              'extern "C" __global__ void k(float* y) {\n'
              "    auto f = [] __device__ (float x) { return 2 * x; };\n"
              "    y[0] = apply(f, y[0]);\n}\n")
    assert candidates.needs_nvcc(["--extended-lambda"])
    report = compile_cubin(source, sass=False, use_cache=False).report
    assert not report.ok and '"--extended-lambda"' in report.errors[0].message
    report = compile_cubin(source, ["--extended-lambda", "-O3", "-DTILE=(16)"], sass=False, use_cache=False).report
    assert report.ok, report.log
    assert report.compiler.startswith("nvcc") and "--extended-lambda" in report.log


@needs_nvcc
def test_a_failed_compile_cached_by_the_older_reading_is_compiled_again():
    import json

    first = compile_cubin(WGMMA_ON_SM90, sass=False).report
    _, _, _, cached = compiler._engine_entry(WGMMA_ON_SM90, (), compiler.DEFAULT_ARCH)
    stored = json.loads((cached / "report.json").read_text())
    assert stored["diagnostics_version"] == compiler.DIAGNOSTICS_VERSION
    assert compile_cubin(WGMMA_ON_SM90, sass=False).report.errors == first.errors   # from the cache
    old = {**stored, "diagnostics": [{"line": None, "message": "ptxas: Ptx assembly aborted due to errors",
                                      "severity": "error"}]}
    del old["diagnostics_version"]
    (cached / "report.json").write_text(json.dumps(old))
    assert compile_cubin(WGMMA_ON_SM90, sass=False).report.errors == first.errors
