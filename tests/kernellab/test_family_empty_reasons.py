"""A family left without variants because a constraint could not be evaluated, or because every
variant's launch fails in some size case, says so at upload and on the Knobs page (gpu_runner.family's
SpecError, shown with its line of problem.toml), rather than "No setting of these knobs satisfies the
constraints"."""
from pathlib import Path

import pytest

from kernellab.models import Problem
from kernellab.services.problems import problem_create
from tests.kernellab.test_spec_upload import (VADD_FAMILY, VADD_FAMILY_TABLE, VADD_REFERENCE, VADD_SPEC, line_of,
                                              needs_nvcc, refusal, upload)

pytestmark = pytest.mark.django_db

OWN = Path(__file__).resolve().parents[1] / "gpu_runner" / "own_kernels"


@needs_nvcc
def test_a_family_whose_only_constraint_cannot_be_evaluated_is_refused_at_upload_naming_it(client, members,
                                                                                          workspace):
    spec = VADD_SPEC + VADD_FAMILY_TABLE.replace("constraints = []", 'constraints = ["A // 0 == 1"]')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY))
    assert ("family.constraints[0]: no setting of the knobs satisfies the constraints, and the constraint "
            "'A // 0 == 1' could not be evaluated for A=1: division by zero") in body
    assert "No setting of these knobs satisfies the constraints in every size case." not in body
    line = line_of(spec, "constraints = [")
    assert f'href="#spec-{line}">line {line}</a>' in body


@needs_nvcc
def test_a_family_whose_every_launch_cannot_be_evaluated_is_refused_at_upload_naming_the_step(client, members,
                                                                                             workspace):
    spec = VADD_SPEC + VADD_FAMILY_TABLE.replace('grid = ["ceil_div(N, 256)"]', 'grid = ["N / (256 * A * 3)"]')
    body = refusal(upload(client, members["engineer"], spec_toml=spec, reference_source=VADD_REFERENCE,
                          family_source=VADD_FAMILY))
    assert ("every setting that satisfies the constraints has a launch plan that fails in some size case, for "
            "instance A=1: 'N / (256 * A * 3)' gives 21845.3, not an integer (size case 'default')") in body
    line = line_of(spec, 'grid = ["N / (256 * A * 3)"]')
    assert f'href="#spec-{line}">line {line}</a>' in body


def test_the_knobs_page_names_a_constraint_that_could_not_be_evaluated(client, members, workspace):
    folder = OWN / "gelu"
    gelu = problem_create(workspace=workspace, user=members["engineer"],
                          spec_toml=(folder / "problem.toml").read_text(),
                          reference_source=(folder / "reference.cu").read_text(), compile=False)
    client.force_login(members["engineer"])
    answer = client.post(f"/problems/{gelu.pk}/knobs", {
        "use-BLOCK": "on", "values-BLOCK": "128, 256", "constraints": "BLOCK // 0 == 1"})
    assert answer.status_code == 400
    page = answer.content.decode()
    assert ("No setting of the knobs satisfies the constraints, and the constraint &#x27;BLOCK // 0 == 1&#x27; "
            "could not be evaluated for BLOCK=128: division by zero") in page
    assert Problem.objects.get(pk=gelu.pk).family_source == ""
