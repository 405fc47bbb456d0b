"""Automatic knobs on the problem page: found in an uploaded naive kernel, confirmed or edited by an
engineer, saved as the problem's family, and explored by the template generator."""
import html
from pathlib import Path

import pytest
from django.utils.html import escape

from gpu_runner.compiler import ToolMissing, find_tool
from kernellab.models import Problem
from kernellab.services.errors import ServiceError
from kernellab.services.problem_knobs import problem_knobs_save
from kernellab.services.problems import problem_create, problem_spec
from kernellab.services.runs import run_create
from tests.gpu_runner.test_auto_knobs import ROW_SOFTMAX_BLOCK_PER_ROW, row_softmax_block_per_row_toml

OWN = Path(__file__).resolve().parents[1] / "gpu_runner" / "own_kernels"
SAXPY = Path(__file__).resolve().parents[1] / "gpu_runner" / "problems" / "saxpy"

try:
    find_tool("nvcc")
    HAVE_NVCC = True
except ToolMissing:
    HAVE_NVCC = False
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="saving knobs compiles variants with nvcc, not installed here")


def _upload(workspace, user, folder: Path, family: str = "") -> Problem:
    return problem_create(workspace=workspace, user=user, spec_toml=(folder / "problem.toml").read_text(),
                          reference_source=(folder / "reference.cu").read_text(), family_source=family, compile=False)


@pytest.fixture
def rmsnorm(workspace, members):
    return _upload(workspace, members["engineer"], OWN / "row_rmsnorm")


def test_the_page_lists_the_knobs_found_in_the_kernel_with_their_values(client, members, rmsnorm):
    client.force_login(members["viewer"])
    page = client.get(f"/problems/{rmsnorm.pk}/knobs").content.decode()
    assert 'name="values-CHUNK" value="1, 2, 4, 8, 16"' in page
    assert 'name="values-UNROLL" value="1, 2, 4, 8"' in page
    assert "#pragma unroll 4 at line 10" in page
    assert "Engineers and above can confirm knobs." in page
    detail = client.get(f"/problems/{rmsnorm.pk}/").content.decode()
    assert f'href="/problems/{rmsnorm.pk}/knobs"' in detail


@needs_nvcc
def test_confirmed_knobs_become_the_family_the_template_generator_explores(client, members, rmsnorm):
    with pytest.raises(ServiceError, match="needs a problem with knobs"):
        run_create(problem=rmsnorm, user=members["engineer"], generator="template", backend="replay", start=False)
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{rmsnorm.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "64, 128, 256",
        "use-UNROLL": "on", "values-UNROLL": "1, 4",
        "values-CHUNK": "1, 2, 4, 8, 16",  # not ticked: stays 4
        "constraints": "BLOCK <= 1024"})
    assert answer.status_code == 302
    rmsnorm.refresh_from_db()
    spec = problem_spec(rmsnorm)
    assert dict(spec.family.knobs) == {"BLOCK": (64, 128, 256), "UNROLL": (1, 4)}
    assert "#define CHUNK 4" in rmsnorm.family_source
    run = run_create(problem=rmsnorm, user=members["engineer"], generator="template", backend="replay", start=False)
    from kernellab.services.run_context import RunContext

    generator = RunContext(run).generator()
    assert len(generator.space.points) == 6
    page = client.get(f"/problems/{rmsnorm.pk}/knobs").content.decode()
    assert 'name="values-BLOCK" value="64, 128, 256"' in page and "These knobs are confirmed." in page
    assert 'id="use-CHUNK" ' in page and 'id="use-CHUNK" checked' not in page


@needs_nvcc
def test_unticking_every_knob_gives_the_problem_back_its_spec(members, rmsnorm):
    original = rmsnorm.spec_toml
    problem_knobs_save(problem=rmsnorm, user=members["engineer"], knobs={"BLOCK": [128, 256]})
    assert Problem.objects.get(pk=rmsnorm.pk).spec_toml != original
    problem_knobs_save(problem=rmsnorm, user=members["engineer"], knobs={})
    rmsnorm.refresh_from_db()
    assert rmsnorm.spec_toml == original and rmsnorm.family_source == ""


def test_values_that_are_not_numbers_are_refused_with_a_sentence_and_nothing_is_saved(client, members, rmsnorm):
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{rmsnorm.pk}/knobs", {"use-BLOCK": "on", "values-BLOCK": "128, lots"})
    assert answer.status_code == 400
    assert "The values of BLOCK must be positive whole numbers separated by commas; &#x27;lots&#x27; is not one." in answer.content.decode()
    assert Problem.objects.get(pk=rmsnorm.pk).family_source == ""


@pytest.mark.parametrize("posted, sentence", [
    ("128, \u00b2", "must be positive whole numbers separated by commas; &#x27;\u00b2&#x27; is not one."),
    ("\u0663", "must be positive whole numbers separated by commas; &#x27;\u0663&#x27; is not one."),  # int() reads it as 3
    ("99999999999999999999", "must be at most 2,147,483,647 (2^31 - 1, the largest C int); "
                             "&#x27;99999999999999999999&#x27; is larger."),
    ("128, 2147483648", "must be at most 2,147,483,647 (2^31 - 1, the largest C int); &#x27;2147483648&#x27; is larger."),
    ("9" * 5000, "must be at most 2,147,483,647 (2^31 - 1, the largest C int); "
                 "&#x27;9999999999999999999999999999999999999999&#x27;... (5,000 characters) is larger."),
])
def test_values_that_are_not_ascii_digits_or_past_a_c_int_are_refused_and_nothing_is_saved(client, members, workspace,
                                                                                             posted, sentence):
    gelu = _upload(workspace, members["engineer"], OWN / "gelu")
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{gelu.pk}/knobs", {"use-BLOCK": "on", "values-BLOCK": posted})
    assert answer.status_code == 400
    assert f'<p class="msg error" id="knob-error">The values of BLOCK {sentence}</p>' in answer.content.decode()
    assert Problem.objects.get(pk=gelu.pk).family_source == ""


def test_the_service_refuses_a_value_past_a_c_int_too(members, rmsnorm):
    with pytest.raises(ServiceError, match="The values of BLOCK must be at most 2,147,483,647 .*; 2147483648 is larger."):
        problem_knobs_save(problem=rmsnorm, user=members["engineer"], knobs={"BLOCK": [128, 2 ** 31]})
    assert Problem.objects.get(pk=rmsnorm.pk).family_source == ""


def test_values_whose_launch_cannot_be_evaluated_are_refused_naming_the_expression(client, members, workspace):
    folder = OWN / "gelu"
    # a shared expression that grows as the cube of the block (and is 0 here): with the largest value a
    # knob may have, it passes klexpr's bound of 2**64 before it is multiplied by 0
    toml = (folder / "problem.toml").read_text().replace('shared = "0"', 'shared = "256 * 256 * 256 * 0"')
    gelu = problem_create(workspace=workspace, user=members["engineer"], spec_toml=toml,
                          reference_source=(folder / "reference.cu").read_text(), compile=False)
    client.force_login(members["engineer"])
    # A value whose launch cannot be evaluated is left out of the family, as a broken constraint is; a family of
    # nothing else is refused, naming the first such setting and the expression.
    answer = client.post(f"/problems/{gelu.pk}/knobs", {"use-BLOCK": "on", "values-BLOCK": "2147483647"})
    assert answer.status_code == 400
    body = html.unescape(answer.content.decode())
    assert ("Every setting that satisfies the constraints has a launch plan that fails in some size case, for instance "
            "BLOCK=2147483647: 'BLOCK * BLOCK * BLOCK * 0' reaches a number beyond 2**64 (size case "
            "'default')") in body
    assert Problem.objects.get(pk=gelu.pk).family_source == ""


def test_a_viewer_cannot_confirm_knobs(members, rmsnorm):
    with pytest.raises(ServiceError):
        problem_knobs_save(problem=rmsnorm, user=members["viewer"], knobs={"BLOCK": [128]})
    assert Problem.objects.get(pk=rmsnorm.pk).family_source == ""


def test_a_problem_with_its_own_family_is_left_to_its_author(client, workspace, members):
    saxpy = _upload(workspace, members["engineer"], SAXPY, family=(SAXPY / "family.cu").read_text())
    client.force_login(members["engineer"])
    assert "this problem has its own [family]" in client.get(f"/problems/{saxpy.pk}/knobs").content.decode()
    with pytest.raises(ServiceError, match="has its own \\[family\\]"):
        problem_knobs_save(problem=saxpy, user=members["engineer"], knobs={"BLOCK": [128]})


@pytest.mark.parametrize("who, sentence", [
    ("viewer", "You need the engineer role or above to upload or change problems and datasets in Team; you are a viewer."),
    ("admin", "SAXPY has its own [family]; edit it in its problem.toml instead."),
])
def test_a_post_to_the_knobs_of_a_problem_with_its_own_family_shows_why_it_is_refused(client, workspace, members,
                                                                                        who, sentence):
    saxpy = _upload(workspace, members["engineer"], SAXPY, family=(SAXPY / "family.cu").read_text())
    client.force_login(members[who])
    answer = client.post(f"/problems/{saxpy.pk}/knobs", {"use-BLOCK": "on", "values-BLOCK": "128"})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "No automatic knobs: this problem has its own [family], written with its spec." in page
    assert f'<p class="msg error" id="knob-error">{escape(sentence)}</p>' in page
    assert Problem.objects.get(pk=saxpy.pk).family_source == (SAXPY / "family.cu").read_text()


@needs_nvcc
def test_knobs_whose_variants_do_not_compile_are_refused(members, workspace):
    folder = OWN / "gelu"
    source = "#define WIDTH 4\nstatic_assert(WIDTH == 4, \"the kernel is written for WIDTH 4\");\n" + (folder / "reference.cu").read_text()
    problem = problem_create(workspace=workspace, user=members["engineer"], spec_toml=(folder / "problem.toml").read_text(),
                             reference_source=source, compile=False)
    with pytest.raises(ServiceError, match="does not compile"):
        problem_knobs_save(problem=problem, user=members["engineer"], knobs={"WIDTH": [2, 4]})
    assert Problem.objects.get(pk=problem.pk).family_source == ""


def _gelu_with_constants(workspace, user, count: int) -> Problem:
    """gelu with `#define K1 1` ... `#define K<count> <count>`: each is a knob the page offers."""
    folder = OWN / "gelu"
    defines = "".join(f"#define K{i} {i}\n" for i in range(1, count + 1))
    return problem_create(workspace=workspace, user=user, spec_toml=(folder / "problem.toml").read_text(),
                          reference_source=defines + (folder / "reference.cu").read_text(), compile=False)


def test_knobs_with_too_many_combinations_are_refused_before_anything_is_enumerated(client, members, workspace):
    problem = _gelu_with_constants(workspace, members["engineer"], 6)
    client.force_login(members["engineer"])
    ticks = {f"use-K{i}": "on" for i in range(1, 7)}
    twelve = {f"values-K{i}": ", ".join(str(v) for v in range(1, 13)) for i in range(1, 7)}
    answer = client.post(f"/problems/{problem.pk}/knobs", {**ticks, **twelve})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "The knobs&#x27; values make 2,985,984 combinations" in page and "more than the 2,097,152 a family may have" in page
    ten = {f"values-K{i}": ", ".join(str(v) for v in range(1, 11)) for i in range(1, 7)}
    answer = client.post(f"/problems/{problem.pk}/knobs", {**ticks, **ten})
    assert answer.status_code == 400  # 1,000,000 settings within the constraints: the walk stops past 65,536
    assert ("More than 65,536 of the knobs&#x27; 1,000,000 combinations satisfy the constraints, and a family may "
            "have at most 65,536 variants") in answer.content.decode()
    assert Problem.objects.get(pk=problem.pk).family_source == ""


def test_a_constraint_naming_no_knob_nor_size_is_refused_and_names_it(client, members, workspace):
    gelu = _upload(workspace, members["engineer"], OWN / "gelu")
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{gelu.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "128, 256, 512, 1024", "constraints": "BLOKC <= 256"})
    assert answer.status_code == 400
    assert "names BLOKC, which is neither a knob of this kernel (BLOCK) nor a size (N)." in answer.content.decode()
    assert Problem.objects.get(pk=gelu.pk).family_source == ""


@needs_nvcc
def test_a_constraint_naming_an_unticked_knob_is_dropped_and_the_page_says_so(client, members, rmsnorm):
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{rmsnorm.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "128, 256", "constraints": "BLOCK <= 1024\nCHUNK*BLOCK <= 4096"}, follow=True)
    assert answer.status_code == 200
    assert ("Dropped, since each names a knob left unticked (which keeps its value in the reference): "
            "CHUNK*BLOCK &lt;= 4096.") in answer.content.decode()
    rmsnorm.refresh_from_db()
    assert [c.text for c in problem_spec(rmsnorm).family.constraints] == ["BLOCK <= 1024"]


def test_a_refused_edit_is_shown_again_as_posted(client, members, rmsnorm):
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{rmsnorm.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "128, 256, abc", "values-CHUNK": "2, 4",
        "values-UNROLL": "1, 2, 4, 8", "constraints": "BLOCK >= 128\nN % BLOCK == 0"})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "&#x27;abc&#x27; is not one." in page
    assert 'name="values-BLOCK" value="128, 256, abc"' in page and 'name="values-CHUNK" value="2, 4"' in page
    assert 'id="use-BLOCK" checked' in page and 'id="use-CHUNK" checked' not in page and 'id="use-UNROLL" checked' not in page
    assert ">BLOCK &gt;= 128\nN % BLOCK == 0</textarea>" in page


@needs_nvcc
def test_a_refused_edit_of_confirmed_knobs_does_not_say_they_are_confirmed(client, members, rmsnorm):
    problem_knobs_save(problem=rmsnorm, user=members["engineer"], knobs={"BLOCK": [64, 128], "UNROLL": [1, 4]},
                       constraints=["BLOCK <= 1024"])
    client.force_login(members["engineer"])
    assert "These knobs are confirmed." in client.get(f"/problems/{rmsnorm.pk}/knobs").content.decode()
    answer = client.post(f"/problems/{rmsnorm.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "128, 256, abc", "constraints": "BLOCK >= 128\nN % BLOCK == 0"})
    page = answer.content.decode()
    assert answer.status_code == 400 and "These knobs are confirmed." not in page
    assert 'name="values-BLOCK" value="128, 256, abc"' in page and 'id="use-UNROLL" checked' not in page
    assert ">BLOCK &gt;= 128\nN % BLOCK == 0</textarea>" in page and "BLOCK &lt;= 1024</textarea>" not in page


def test_the_thread_count_of_a_block_per_row_softmax_is_offered_as_its_block_size(client, members, workspace):
    softmax = problem_create(workspace=workspace, user=members["engineer"], spec_toml=row_softmax_block_per_row_toml(),
                             reference_source=ROW_SOFTMAX_BLOCK_PER_ROW, compile=False)
    client.force_login(members["engineer"])
    page = client.get(f"/problems/{softmax.pk}/knobs").content.decode()
    assert '<code>THREADS</code></label> <small class="muted">block</small>' in page
    assert "the block size of row_softmax" in page and "stays 256" not in page and "stays (256)" not in page
    assert 'name="values-THREADS" value="64, 128, 256, 512, 1024"' in page


@needs_nvcc
def test_saving_the_thread_count_of_a_block_per_row_softmax_varies_its_block_with_it(client, members, workspace):
    softmax = problem_create(workspace=workspace, user=members["engineer"], spec_toml=row_softmax_block_per_row_toml(),
                             reference_source=ROW_SOFTMAX_BLOCK_PER_ROW, compile=False)
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{softmax.pk}/knobs", {
        "use-THREADS": "on", "values-THREADS": "64, 128, 256, 512, 1024", "constraints": "THREADS <= 1024"})
    assert answer.status_code == 302
    softmax.refresh_from_db()
    spec = problem_spec(softmax)
    assert dict(spec.family.knobs) == {"THREADS": (64, 128, 256, 512, 1024)}
    assert [e.text for e in spec.family.launch[0].block] == ["THREADS"]
