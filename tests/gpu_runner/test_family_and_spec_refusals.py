"""QA's second round on specs and families: a `when` that names a size, variants whose launch cannot be
evaluated, constraints that cannot be evaluated, string knobs compared with a value they do not have,
init ranges written backwards, a kernel name found only in a comment, every mistake of a table, and
[vendor] baselines given dtypes or shapes they do not compute."""
from pathlib import Path

import pytest

from gpu_runner import SpecError, enumerate_variants, parse_problem, render_variant
from gpu_runner.candidate import check_candidate
from gpu_runner.family import check_family_size
from tests.gpu_runner.helpers import PROBLEMS

REFERENCE = (PROBLEMS / "saxpy" / "reference.cu").read_text()
TEMPLATE = (PROBLEMS / "saxpy" / "family.cu").read_text()
TOML = (PROBLEMS / "saxpy" / "problem.toml").read_text()
KNOBS = "knobs = { BLOCK = [128, 256, 512, 1024], ITEMS = [1, 2, 4], VEC = [1, 4] }"
CONSTRAINTS = 'constraints = ["BLOCK*ITEMS*VEC <= 4096"]'
STEP = '[[family.launch]]\nkernel = "saxpy_family"'
GRID = 'grid = ["ceil_div(N, BLOCK*ITEMS*VEC)"]'
ROOT = Path(__file__).resolve().parents[2]


def saxpy(*changes: tuple[str, str]):
    text = TOML
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    return parse_problem(text, REFERENCE, TEMPLATE)


def errors_of(*changes: tuple[str, str], reference: str = REFERENCE) -> list[SpecError]:
    text = TOML
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    with pytest.raises(SpecError) as caught:
        parse_problem(text, reference, TEMPLATE)
    return caught.value.errors


# --- 1. a step's `when` is read once per variant, so it may not name a size


def test_a_when_that_names_a_size_is_refused_at_the_steps_when():
    # QA p26: vec4 step when "N % 4 == 0", scalar step when "N % 4 != 0", a size case N = 1000003: the
    # plan chosen in the default case (vec4) was used in every case, and every variant failed validation.
    [error] = errors_of((STEP, f'{STEP}\nwhen = "N % 4 == 0 and VEC == 4"'))
    assert error.field == "family.launch[0].when"
    assert error.message.startswith("a step's when is read once per variant, over its knobs; it may not name "
                                    "the size N")
    assert "constraint" in error.message
    assert error.line == TOML.splitlines().index('kernel = "saxpy_family"') + 2


def test_a_when_over_knobs_only_is_still_read():
    problem = saxpy((STEP, f'{STEP}\nwhen = "VEC == 4 or VEC == 1"'))
    assert len(list(enumerate_variants(problem))) == 21


@pytest.mark.skipif(not (ROOT / "kernellab" / "problems").is_dir(), reason="no bundled problems")
def test_no_bundled_family_names_a_size_in_a_when():
    from gpu_runner import load_problem

    for folder in sorted(p.parent for p in (ROOT / "kernellab" / "problems").glob("*/problem.toml")):
        problem = load_problem(folder)
        for step in problem.family.launch if problem.family else ():
            assert step.when is None or not step.when.names & problem.size_names, folder.name


# --- 2. a variant whose launch cannot be evaluated is left out, and an empty family says why


def test_a_variant_whose_grid_is_not_integral_in_some_size_case_is_left_out():
    # QA p27: PER_THREAD = 3 gives a grid of N / 768, not an integer; it used to stay in the family.
    problem = saxpy((KNOBS, "knobs = { PER_THREAD = [1, 3, 4], BLOCK = [128], ITEMS = [1], VEC = [1] }"),
                    (GRID, 'grid = ["N / (BLOCK * PER_THREAD)"]'), ("odd = { N = 1000003 }", "odd = { N = 1048576 }"),
                    ("default = { N = 16777216 }", "default = { N = 16777216 }"))
    variants = list(enumerate_variants(problem))
    assert [v["PER_THREAD"] for v in variants] == [1, 4]
    for knobs in variants:
        check_candidate(problem, render_variant(problem, knobs))


def test_a_variant_whose_temp_cannot_be_evaluated_is_left_out():
    problem = saxpy((KNOBS, "knobs = { BLOCK = [128, 256], ITEMS = [0, 1], VEC = [1] }"),
                    (GRID, 'grid = ["ceil_div(N, BLOCK*max(ITEMS, 1)*VEC)"]'),
                    (CONSTRAINTS, f"{CONSTRAINTS}\n[[family.temps]]\nname = \"partials\"\ndtype = \"float32\"\n"
                                  "shape = [\"ceil_div(N, BLOCK * ITEMS)\"]"))
    assert [v["ITEMS"] for v in enumerate_variants(problem)] == [1, 1]


def test_a_family_whose_every_variant_has_a_launch_that_cannot_be_evaluated_says_why():
    problem = saxpy((KNOBS, "knobs = { PER_THREAD = [3, 5], BLOCK = [128], ITEMS = [1], VEC = [1] }"),
                    (GRID, 'grid = ["N / (BLOCK * PER_THREAD)"]'))
    with pytest.raises(SpecError) as caught:
        check_family_size(problem)
    assert caught.value.field == "family.launch[0].grid[0]"
    assert caught.value.message == (
        "every setting that satisfies the constraints has a launch plan that fails in some size case, for instance "
        "PER_THREAD=3,BLOCK=128,ITEMS=1,VEC=1: 'N / (BLOCK * PER_THREAD)' gives 43690.7, not an integer "
        "(size case 'default')")


def test_a_family_whose_variants_break_a_limit_still_says_which_limit():
    problem = saxpy((KNOBS, "knobs = { BLOCK = [2048], ITEMS = [1], VEC = [1] }"))
    with pytest.raises(SpecError, match="every setting that satisfies the constraints breaks a CUDA launch limit"):
        check_family_size(problem)


# --- 3. a constraint that cannot be evaluated does not hold, and an empty family names it


@pytest.mark.parametrize("constraint, fragment", [
    ("BLOCK // 0 == 1", "the constraint 'BLOCK // 0 == 1' could not be evaluated for BLOCK=128: division by zero"),
    ("N / (BLOCK - 128) > 0 and BLOCK < 256",
     "the constraint 'N / (BLOCK - 128) > 0 and BLOCK < 256' could not be evaluated for BLOCK=128 in size case "
     "'default': division by zero"),
])
def test_an_empty_family_names_the_constraint_that_could_not_be_evaluated(constraint, fragment):
    problem = saxpy((CONSTRAINTS, f'constraints = ["{constraint}"]'))
    with pytest.raises(SpecError) as caught:
        list(enumerate_variants(problem))
    assert caught.value.field == "family.constraints[0]"
    assert caught.value.message.startswith("no setting of the knobs satisfies the constraints")
    assert fragment in caught.value.message


def test_a_constraint_that_cannot_be_evaluated_for_some_variants_only_leaves_those_out():
    problem = saxpy((CONSTRAINTS, 'constraints = ["N // (BLOCK - 128) > 0"]'))
    assert {v["BLOCK"] for v in enumerate_variants(problem)} == {256, 512, 1024}


def test_a_family_without_variants_for_an_ordinary_reason_still_yields_nothing():
    problem = saxpy((CONSTRAINTS, 'constraints = ["BLOCK > 4096"]'))
    assert list(enumerate_variants(problem)) == []


# --- 4. a string compared with a knob must be one of its values


@pytest.mark.parametrize("condition", ["ALGO == 'twopas'", "'twopas' != ALGO", "VEC == 4 and ALGO == 'twopas'"])
def test_a_when_comparing_a_string_knob_with_a_value_it_does_not_have_is_refused(condition):
    # QA p55: when = "ALGO == 'twopas'" (for 'twopass') was accepted, and the step never ran.
    [error] = errors_of((KNOBS, KNOBS.replace("VEC = [1, 4] }", 'VEC = [1, 4], ALGO = ["plain", "twopass"] }')),
                        (STEP, f'{STEP}\nwhen = "{condition}"'))
    assert error.field == "family.launch[0].when"
    assert error.message == ("compares the knob ALGO with 'twopas', which is not one of its values ('plain', "
                             "'twopass'), so the comparison never holds")


def test_a_constraint_comparing_a_knob_with_a_value_it_does_not_have_is_refused():
    [error] = errors_of((KNOBS, KNOBS.replace("VEC = [1, 4] }", 'VEC = [1, 4], ALGO = ["plain", "wide"] }')),
                        (CONSTRAINTS, "constraints = [\"BLOCK*ITEMS*VEC <= 4096\", \"ALGO != 'wde' or VEC == 4\"]"))
    assert error.field == "family.constraints[1]"
    assert "compares the knob ALGO with 'wde'" in error.message and "('plain', 'wide')" in error.message
    [error] = errors_of((CONSTRAINTS, "constraints = [\"BLOCK == 'big'\"]"))
    assert error.message.startswith("compares the knob BLOCK with 'big', which is not one of its values (128, 256")


# --- 5. init ranges


@pytest.mark.parametrize("init, fragment", [
    ("randint:1048575:0", "'randint:1048575:0' draws from LO = 1048575 to HI = 0, but LO is larger than HI; "
                          "write randint:0:1048575"),
    ("uniform:5:1", "'uniform:5:1' draws from LO = 5 to HI = 1, but LO is larger than HI"),
    ("uniform:1.2.3:4", "LO and HI must be numbers"),
])
def test_an_init_range_written_backwards_is_refused(init, fragment):
    [error] = errors_of(('init = "uniform"', f'init = "{init}"'))
    assert error.field == "args[1] ('y').init"
    assert fragment in error.message


@pytest.mark.parametrize("init", ["randint:-3:3", "randint:7:7", "uniform:-1:1", "uniform:0.5:2e3"])
def test_an_init_range_in_order_is_read(init):
    assert saxpy(('init = "uniform"', f'init = "{init}"')).arg("y").init == init


# --- 6. a kernel name in a comment or a string is not a definition


@pytest.mark.parametrize("mention", [
    "// TODO: saxpy_v2 will use float4\n",
    "/* saxpy_v2\n   comes later */\n",
    'static const char* note = "saxpy_v2";\n',
])
def test_a_kernel_typo_named_only_in_a_comment_or_string_gets_the_defined_kernels(mention):
    # QA p52: kernel = "scale_v2", a comment mentions scale_v2: the advice was to declare it extern "C".
    [error] = errors_of(('kernel = "saxpy"\n', 'kernel = "saxpy_v2"\n'), reference=mention + REFERENCE)
    assert error.field == "launch[0].kernel"
    assert "reference.cu defines no __global__ function 'saxpy_v2' (it defines: saxpy)" in error.message


def test_a_kernel_made_by_a_macro_is_still_left_to_the_compiler():
    source = ('#define KERNEL(name) extern "C" __global__ void name(const float* x, const float* y, float* out, '
              'float a, int n)\nKERNEL(saxpy_v2) { int i = blockIdx.x * blockDim.x + threadIdx.x; '
              'if (i < n) out[i] = a * x[i] + y[i]; }\n// "a quote in a comment\n')
    problem = parse_problem(TOML.replace('kernel = "saxpy"\n', 'kernel = "saxpy_v2"\n', 1), source, TEMPLATE)
    assert problem.reference.launch[0].kernel == "saxpy_v2"


# --- 7. every mistake of a table


def test_every_mistake_of_a_tolerance_table_is_listed():
    errors = errors_of(("float32 = { rtol = 1e-5, atol = 1e-6 }",
                        'fp32 = { rtol = 1e-5 }\nfloat16 = { rtol = -1, atol = "x" }'))
    assert [(e.field, e.message) for e in errors] == [
        ("tolerance.fp32", "'fp32' is not a dtype"),
        ("tolerance.float16.rtol", "must be a non-negative number, not -1"),
        ("tolerance.float16.atol", "must be a non-negative number, not 'x'"),
    ]
    assert errors[1].line == errors[2].line == errors[0].line + 1


def test_an_unknown_family_field_does_not_hide_the_mistakes_after_it():
    errors = errors_of(("[family]\n", "[family]\nargs_extra = 1\n"),
                       ('block = ["BLOCK"]\nshared = "0"\nargs = ["x", "y", "out", "a", "n"]',
                        'block = ["BLOCK"]\nshared = "0"\nargs = ["x", "y", "out", "a", "z"]'))
    assert [e.field for e in errors] == ["family.args_extra", "family.launch[0].args[4]"]
    assert errors[0].message.startswith("unknown field") and "unknown argument 'z'" in errors[1].message


def test_an_unknown_field_of_a_step_does_not_hide_the_mistakes_after_it():
    errors = errors_of(('block = ["BLOCK"]\nshared = "0"\nargs = ["x", "y", "out", "a", "n"]',
                        'block = ["BLOCK"]\nshared = "0"\nargs_extra = 1\nargs = ["x", "y", "out", "a", "z"]'))
    assert [e.field for e in errors] == ["family.launch[0].args_extra", "family.launch[0].args[4]"]
    assert errors[0].message.startswith("unknown field")


# --- 8. [vendor] dtypes and shapes


SGEMM = ROOT / "kernellab" / "problems" / "sgemm"
needs_sgemm = pytest.mark.skipif(not SGEMM.is_dir(), reason="no bundled problems")


def sgemm_errors(*changes: tuple[str, str]) -> list[SpecError]:
    text = (SGEMM / "problem.toml").read_text().split("\n[family]", 1)[0]
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    with pytest.raises(SpecError) as caught:
        parse_problem(text, (SGEMM / "reference.cu").read_text())
    return [e for e in caught.value.errors if e.field.startswith("vendor")]


@needs_sgemm
def test_a_gemm_baseline_given_another_dtype_is_refused():
    errors = sgemm_errors(('kind = "cublas_sgemm"', 'kind = "cublas_hgemm"'))
    assert [(e.field, e.message) for e in errors] == [
        ("vendor.inputs", "cublas_hgemm takes float16 inputs (cublas_sgemm takes float32 ones), but 'A' is float32 "
                          "and 'B' is float32"),
        ("vendor.output", "cublas_hgemm writes a float16 output, but 'C' is float32"),
    ]
    [error] = sgemm_errors(('dtype = "float32"\nshape = ["M", "K"]', 'dtype = "float16"\nshape = ["M", "K"]'))
    assert error.field == "vendor.inputs" and "but 'A' is float16" in error.message


@needs_sgemm
def test_a_gemm_baseline_given_shapes_it_does_not_multiply_is_refused():
    # QA p51: B [N, K] with cublas_sgemm was accepted; in a case where N != K the baseline fails.
    [error] = sgemm_errors(('shape = ["K", "N"]', 'shape = ["N", "K"]'))
    assert error.field == "vendor.kind"
    assert error.message == ("cublas_sgemm computes C = A @ B of row-major matrices: A [M, K], B [K, N], C [M, N]; "
                             "in size case 'rect' the spec gives A [1280, 640], B [768, 640], C [1280, 768]")


@pytest.mark.parametrize("kind, output_shape, fragment", [
    ("cupy_sum", '["N"]', "cupy_sum computes out[0] = sum(x): one output element; in size case 'default' the spec "
                          "gives x [8388608], out [8388608]"),
    ("cupy_softmax", "[1]", "the output's shape is the input's"),
    ("cupy_transpose", "[1]", "the output's shape is the input's reversed"),
])
def test_other_baselines_check_their_shapes(kind, output_shape, fragment):
    text = (PROBLEMS / "reduce_sum" / "problem.toml").read_text()
    text = text.replace('kind = "cupy_sum"', f'kind = "{kind}"').replace(
        'name = "out"\nrole = "output"\ndtype = "float32"\nshape = [1]',
        f'name = "out"\nrole = "output"\ndtype = "float32"\nshape = {output_shape}')
    with pytest.raises(SpecError) as caught:
        parse_problem(text, (PROBLEMS / "reduce_sum" / "reference.cu").read_text())
    [error] = [e for e in caught.value.errors if e.field.startswith("vendor")]
    assert error.field == "vendor.kind" and fragment in error.message


@pytest.mark.skipif(not (ROOT / "kernellab" / "problems").is_dir(), reason="no bundled problems")
def test_every_bundled_vendor_baseline_fits_its_dtypes_and_shapes():
    from gpu_runner import load_problem

    kinds = {load_problem(p.parent).vendor.kind for p in (ROOT / "kernellab" / "problems").glob("*/problem.toml")
             if 'kind = "none"' not in p.read_text() and "[vendor]" in p.read_text()}
    assert kinds == {"cublas_sgemm", "cublas_hgemm", "cublas_sgemv", "cupy_dot", "cupy_sum", "cupy_transpose",
                     "cupy_softmax"}
