"""Automatic knobs on the problem page: found in an uploaded naive kernel, confirmed or edited by an
engineer, saved as the problem's family, and explored by the template generator."""
from pathlib import Path

import pytest

from gpu_runner.compiler import ToolMissing, find_tool
from kernellab.models import Problem
from kernellab.services.errors import ServiceError
from kernellab.services.problem_knobs import problem_knobs_save
from kernellab.services.problems import problem_create, problem_spec
from kernellab.services.runs import run_create

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


@needs_nvcc
def test_knobs_whose_variants_do_not_compile_are_refused(members, workspace):
    folder = OWN / "gelu"
    source = "#define WIDTH 4\nstatic_assert(WIDTH == 4, \"the kernel is written for WIDTH 4\");\n" + (folder / "reference.cu").read_text()
    problem = problem_create(workspace=workspace, user=members["engineer"], spec_toml=(folder / "problem.toml").read_text(),
                             reference_source=source, compile=False)
    with pytest.raises(ServiceError, match="does not compile"):
        problem_knobs_save(problem=problem, user=members["engineer"], knobs={"WIDTH": [2, 4]})
    assert Problem.objects.get(pk=problem.pk).family_source == ""
