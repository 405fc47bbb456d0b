"""The Knobs page on QA's odd inputs (a constraint of 5,000 '-' signs, NUL characters, deep parentheses,
long lists of values) and the lines its compile errors name: those of the file the person wrote."""
from pathlib import Path

import pytest

from gpu_runner.compiler import ToolMissing, find_tool
from kernellab.models import Problem
from kernellab.services.errors import ServiceError
from kernellab.services.problem_knobs import _compile_extremes, problem_knobs_save
from kernellab.services.problems import problem_create, problem_spec
from tests.gpu_runner.test_auto_knobs_qa import HIST, HIST_TOML, TRANSPOSE, TRANSPOSE_TOML

OWN = Path(__file__).resolve().parents[1] / "gpu_runner" / "own_kernels"

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="saving knobs compiles variants with nvcc, not installed here")


def _create(workspace, user, toml: str, source: str) -> Problem:
    return problem_create(workspace=workspace, user=user, spec_toml=toml, reference_source=source, compile=False)


@pytest.fixture
def gelu(workspace, members):
    folder = OWN / "gelu"
    return _create(workspace, members["engineer"], (folder / "problem.toml").read_text(), (folder / "reference.cu").read_text())


# ---- 7. odd inputs are refused with a sentence, never a 500 -----------------------------------------------
@pytest.mark.parametrize("fields, sentence", [
    ({"constraints": "-" * 5000 + "BLOCK <= 1024"}, "cannot be read: the expression is longer than 1000 characters."),
    ({"constraints": "(" * 400 + "BLOCK" + ")" * 400}, "cannot be read: it is not a valid expression"),
    ({"constraints": "(" * 100_000}, "cannot be read: the expression is longer than 1000 characters."),
    ({"constraints": "BLOCK\x00 <= 1024"}, "cannot be read: it is not a valid expression"),
    ({"constraints": "BLOCK <= 1024\n" + "-" * 999 + "1 < 2"}, "cannot be read:"),
    ({"constraints": "BLOCK.bit_length() < 3"}, "cannot be read:"),
    ({"values-BLOCK": "128\x00, 256"}, "must be positive whole numbers separated by commas"),
    ({"values-BLOCK": ", ".join(str(v) for v in range(1, 100_001))}, "has more than 32 values"),
    ({"values-BLOCK": "(" * 5000}, "must be positive whole numbers separated by commas"),
    ({"values-BLOCK": ""}, "needs at least one value"),
])
def test_odd_inputs_on_the_knobs_page_are_refused_with_a_sentence(client, members, gelu, fields, sentence):
    client.force_login(members["engineer"])
    posted = {"use-BLOCK": "on", "values-BLOCK": "128, 256", **fields}
    answer = client.post(f"/problems/{gelu.pk}/knobs", posted)
    assert answer.status_code == 400
    page = answer.content.decode()
    assert 'id="knob-error"' in page and sentence.replace("'", "&#x27;") in page
    assert Problem.objects.get(pk=gelu.pk).family_source == ""


def test_an_unreadable_constraint_with_no_knob_ticked_is_refused_too(client, members, gelu):
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{gelu.pk}/knobs", {"constraints": "-" * 5000 + "BLOCK <= 1024"})
    assert answer.status_code == 400
    assert "cannot be read: the expression is longer than 1000 characters." in answer.content.decode()


# ---- 1 and 6 on the page: the proposal as it stands can be saved ---------------------------------------------
def test_the_histograms_page_offers_no_bin_count_and_says_why(client, members, workspace):
    histogram = _create(workspace, members["engineer"], HIST_TOML, HIST)
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{histogram.pk}/knobs").content.decode()
    assert 'name="values-NUM_BINS"' not in page and 'name="values-BLOCK"' in page
    assert "NUM_BINS (#define NUM_BINS at line 1) stays 256: the argument hist has 256 elements" in page


@needs_nvcc
def test_the_transposes_proposal_saves_as_proposed(client, members, workspace):
    transpose = _create(workspace, members["engineer"], TRANSPOSE_TOML, TRANSPOSE)
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{transpose.pk}/knobs").content.decode()
    assert 'name="values-TILE_DIM" value="8, 16, 32, 64"' in page
    assert "TILE_DIM is not proposed at 128" in page
    from kernellab.selectors.problem_knobs import problem_knobs

    found = problem_knobs(problem=transpose)
    answer = client.post(f"/problems/{transpose.pk}/knobs", {
        **{f"use-{row.name}": "on" for row in found.rows},
        **{f"values-{row.name}": ", ".join(map(str, row.values)) for row in found.rows},
        "constraints": "\n".join(found.constraints)})
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    transpose.refresh_from_db()
    spec = problem_spec(transpose)
    assert [e.text for e in spec.family.launch[0].grid] == ["ceil_div(C, TILE_DIM)", "ceil_div(R, TILE_DIM)"]


# ---- 8. compile errors name the lines of the file the person wrote -------------------------------------------
KNOB_ERROR = """// line 1
// line 2
#define DEPTH 4

extern "C" __global__ void gelu(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    static_assert(DEPTH < 8, "DEPTH must be below 8");
    float s = 0.0f;
#pragma unroll 4
    for (int k = 0; k < DEPTH; ++k) s += k;
    if (i < n) out[i] = x[i] + s * 0.0f;
}
"""


@needs_nvcc
def test_a_knob_that_breaks_the_compile_is_reported_at_its_line_of_the_reference(members, workspace):
    folder = OWN / "gelu"
    problem = _create(workspace, members["engineer"], (folder / "problem.toml").read_text(), KNOB_ERROR)
    with pytest.raises(ServiceError) as refused:
        # three #define lines and the unroll knob's constant come before the reference in the variant
        problem_knobs_save(problem=problem, user=members["engineer"],
                           knobs={"DEPTH": [4, 16], "UNROLL": [1, 4], "BLOCK": [256]})
    message = str(refused.value)
    assert message.startswith("The variant DEPTH=16, UNROLL=4, BLOCK=256 does not compile: reference.cu line 7: ")
    assert "DEPTH must be below 8" in message
    assert "does not compile: does not compile" not in message
    assert Problem.objects.get(pk=problem.pk).family_source == ""


FAMILY_TOML = """
[family]
source = "family.cu"
knobs = { A = [1, 2], B = [1] }
constraints = []

[[family.launch]]
kernel = "vadd"
grid = ["ceil_div(N, 256)"]
block = [256]
args = ["a", "b", "c", "n"]
"""

FAMILY = """// a family
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int oops = undefined_var;
    if (i < n) c[i] = a[i] + b[i] + A + B;
}
"""


@needs_nvcc
def test_an_uploaded_familys_compile_error_is_reported_at_its_line_of_family_cu():
    from gpu_runner.spec import parse_problem
    from tests.kernellab.test_spec_upload import VADD_SPEC

    vadd = VADD_SPEC.replace('name = "vadd"', 'name = "qa_famerr"').replace("N = 16777216", "N = 1024")
    reference = FAMILY.replace("    int oops = undefined_var;\n", "").replace(" + A + B", "")
    spec = parse_problem(vadd + FAMILY_TOML, reference, FAMILY)
    with pytest.raises(ServiceError) as refused:
        _compile_extremes(spec)
    message = str(refused.value)
    assert message.startswith("The variant A=1, B=1 does not compile: family.cu line 4: ")
    assert "undefined_var" in message and "does not compile: does not compile" not in message
