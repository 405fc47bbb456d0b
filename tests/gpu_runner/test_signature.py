"""A spec's launch steps are checked against the kernels' parameters, and a spec with several
mistakes reports all of them, each with its TOML line."""
from pathlib import Path

import pytest

from gpu_runner import Candidate, SpecError, load_problem, parse_problem
from gpu_runner.signature import kernel_signatures
from gpu_runner.spec import reference_kind
from tests.gpu_runner.helpers import PROBLEMS, saxpy_problem

ROOT = Path(__file__).resolve().parents[2]
# The CUDA problems (a KernelBench-format one, kind = "pytorch", has no launch steps to fit).
BUNDLED = sorted(p.parent for p in (ROOT / "kernellab" / "problems").glob("*/problem.toml")
                 if reference_kind(p.read_text()) == "cuda")
TEST_PROBLEMS = sorted(p.parent for p in PROBLEMS.glob("*/problem.toml"))

GELU_TOML = """\
[problem]
name = "gelu"

[sizes]
default = { N = 4096 }

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
kernel = "gelu"
grid = ["ceil_div(N, 256)"]
block = [256]
args = ["x", "y", "n"]
"""
GELU_CU = """\
extern "C" __global__ void gelu(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.5f * x[i] * (1.0f + tanhf(0.79788456f * x[i]));
}
"""


def errors_of(toml_text: str, source: str = GELU_CU) -> list[SpecError]:
    with pytest.raises(SpecError) as info:
        parse_problem(toml_text, source)
    return info.value.errors


@pytest.mark.parametrize("folder", BUNDLED + TEST_PROBLEMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_bundled_problem_fits_its_kernels(folder):
    problem = load_problem(folder)
    assert problem.reference.launch


def test_a_step_that_passes_two_arguments_to_a_three_parameter_kernel_is_refused():
    [error] = errors_of(GELU_TOML.replace('args = ["x", "y", "n"]', 'args = ["x", "y"]'))
    assert error.field == "launch[0].args"
    assert error.line == 27
    assert "passes 2 arguments ('x', 'y') but kernel gelu (line 1) takes 3" in error.message
    assert "int n" in error.message


def test_a_step_that_passes_four_arguments_to_a_three_parameter_kernel_is_refused():
    text = GELU_TOML.replace('args = ["x", "y", "n"]', 'args = ["x", "y", "n", "x"]')
    [error] = errors_of(text)
    assert "passes 4 arguments" in error.message and "takes 3" in error.message


@pytest.mark.parametrize("declaration, fragment", [
    ("const float* __restrict__ x, float* __restrict__ y, float n", "a int32 scalar needs int"),
    ("const float* __restrict__ x, float* __restrict__ y, int* n", "must be int, not a pointer"),
    ("const double* __restrict__ x, float* __restrict__ y, int n", "a float32 buffer needs float*"),
    ("float x, float* __restrict__ y, int n", "must be float*"),
    ("const __half* x, float* __restrict__ y, int n", "a float32 buffer needs float*"),
])
def test_a_parameter_of_the_wrong_kind_or_type_is_named_with_both_types(declaration, fragment):
    source = GELU_CU.replace("const float* __restrict__ x, float* __restrict__ y, int n", declaration)
    [error] = errors_of(GELU_TOML, source)
    assert fragment in error.message
    assert "of kernel gelu (line 1), declared" in error.message


def test_an_output_the_kernel_can_only_read_is_refused():
    source = GELU_CU.replace("float* __restrict__ y", "const float* __restrict__ y")
    [error] = errors_of(GELU_TOML, source)
    assert error.field == "launch[0].args[1]"
    assert "the output 'y' is passed only as const" in error.message


def test_a_kernel_the_source_does_not_define_is_refused():
    [error] = errors_of(GELU_TOML.replace('kernel = "gelu"', 'kernel = "gelu_fast"'))
    assert error.field == "launch[0].kernel"
    assert "defines no __global__ function 'gelu_fast' (it defines: gelu)" in error.message


@pytest.mark.parametrize("declaration, dtype", [
    ("const __half* x, __half* y, int n", "float16"),
    ("const __nv_bfloat16* x, __nv_bfloat16* y, long long n", "bfloat16"),
    ("const float4* x, float* y, int32_t n", "float32"),
    ("const double* x, double* y, size_t n", "float64"),
])
def test_matching_half_bf16_vector_and_64_bit_types_are_accepted(declaration, dtype):
    source = GELU_CU.replace("const float* __restrict__ x, float* __restrict__ y, int n", declaration)
    scalar = "int64" if ("long long" in declaration or "size_t" in declaration) else "int32"
    text = GELU_TOML.replace('dtype = "float32"', f'dtype = "{dtype}"').replace('dtype = "int32"', f'dtype = "{scalar}"')
    assert parse_problem(text, source).name == "gelu"


def test_a_typedef_is_resolved_and_an_unknown_type_is_checked_for_pointer_only():
    typedef = "typedef float real;\n" + GELU_CU.replace("const float* __restrict__ x", "const real* x")
    assert parse_problem(GELU_TOML, typedef).name == "gelu"
    templated = GELU_CU.replace("const float* __restrict__ x", "const T* x")
    assert parse_problem(GELU_TOML, templated).name == "gelu"
    with pytest.raises(SpecError, match="must be float\\*"):
        parse_problem(GELU_TOML, GELU_CU.replace("const float* __restrict__ x", "T x"))


def test_a_family_step_is_checked_against_the_template():
    problem_toml = (PROBLEMS / "saxpy" / "problem.toml").read_text()
    reference = (PROBLEMS / "saxpy" / "reference.cu").read_text()
    family = (PROBLEMS / "saxpy" / "family.cu").read_text().replace("float a, int n", "int n")
    with pytest.raises(SpecError) as info:
        parse_problem(problem_toml, reference, family)
    [error] = info.value.errors
    assert error.field == "family.launch[0].args"
    assert "(family.cu)" in error.message and "takes 4" in error.message


def test_a_candidate_whose_launch_does_not_fit_its_kernel_is_refused():
    problem = saxpy_problem()
    source = (PROBLEMS / "saxpy" / "reference.cu").read_text()
    data = {"source": source, "launch": [{"kernel": "saxpy", "grid": ["ceil_div(N, 256)"], "block": [256],
                                          "args": ["x", "y", "out", "n", "a"]}]}
    with pytest.raises(SpecError) as info:
        Candidate.from_dict(data, problem)
    messages = [e.message for e in info.value.errors]
    assert len(messages) == 2
    assert "argument 'n' (int32 scalar) does not fit parameter 4 'a'" in messages[0]
    assert "argument 'a' (float32 scalar) does not fit parameter 5 'n'" in messages[1]


def test_a_spec_with_several_mistakes_reports_each_with_its_toml_line():
    text = (GELU_TOML.replace('dtype = "float32"\nshape = ["N"]\n[[args]]\nname = "y"',
                              'dtype = "float128"\nshape = ["N"]\n[[args]]\nname = "y"')
            .replace('role = "scalar"', 'role = "constant"')
            .replace('block = [256]', 'block = []')
            + "\n[roofline]\nflops = \"2*Q\"\n")
    errors = errors_of(text)
    by_field = {e.field: e.line for e in errors}
    assert by_field == {"args[0] ('x').dtype": 10, "args[2] ('n').role": 19, "launch[0].block": 26,
                        "roofline.flops": 30}


def test_a_toml_syntax_error_names_its_line():
    [error] = errors_of(GELU_TOML.replace('block = [256]', 'block = [256'))
    # tomllib notices the unclosed array where the next key starts
    assert error.field == "problem.toml" and error.line == 27 and "not valid TOML" in error.message


def test_the_kernel_parser_finds_kernels_inside_extern_c_blocks_and_preprocessor_branches():
    source = ('extern "C" {\n#if defined(FAST)\n__global__ void k(float* a, int n) {}\n#else\n'
              '__global__ void k(float* a, int n, int m) {}\n#endif\n}\n')
    [first, second] = kernel_signatures(source)["k"]
    assert (first.line, len(first.parameters)) == (3, 2) and (second.line, len(second.parameters)) == (5, 3)


def test_the_parser_reads_declarations_not_function_bodies():
    # Kernels in a namespace and a template, and aliases at namespace or class scope, are found; an alias declared
    # inside a function body is local to it and does not rename another function's parameter types.
    source = ('namespace fast {\nusing real = float;\n'
              'template <typename T> __global__ void k(const T* a, real* b, int n) {\n'
              '  typedef double real2;\n  if (n) { using T2 = int; }\n}\n}\n'
              'struct S { typedef float F; };\n'
              '__global__ void m(S::F* c) {}\n'
              'void host() { using U = float; }\n'
              '__global__ void u(U* d) {}\n')
    signatures = kernel_signatures(source)
    [k] = signatures["k"]
    assert [p.base_type for p in k.parameters] == ["T", "float", "int"] and k.line == 3
    assert "m" in signatures and signatures["u"][0].parameters[0].base_type == "U"
    assert set(signatures) == {"k", "m", "u"}
