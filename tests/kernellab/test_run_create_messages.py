"""run_create's refusals name the real reason first: a missing LLM endpoint before an LLM setting, and for a
KernelBench task the generator that works there."""
import pytest

from kernellab.config import LLMEndpoint
from kernellab.models import SearchRun
from kernellab.services import ServiceError
from kernellab.services.runs import run_create

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


def test_without_an_llm_endpoint_the_llm_generator_is_refused_for_that_before_its_screening_width(problem, members,
                                                                                                  settings):
    settings.KERNELLAB_LLM = LLMEndpoint(base_url=None, api_key=None, surrogate_model=None, generator_model=None)
    assert not settings.KERNELLAB_LLM.configured
    with pytest.raises(ServiceError, match="No LLM endpoint is configured"):
        run_create(problem=problem, user=members["engineer"], generator="llm", screening_width=256, start=False)
    assert not SearchRun.objects.exists()


def test_the_template_generator_on_a_kernelbench_task_points_to_the_replayed_generator(workspace, members):
    from kernellab.services.problems import problem_create_pytorch
    from tests.kernelbench.test_program_parsing import RELU

    task = problem_create_pytorch(workspace=workspace, user=members["engineer"], program_source=RELU, name="relu")
    with pytest.raises(ServiceError, match="Use the replayed generator"):
        run_create(problem=task, user=members["engineer"], generator="template", start=False)
    assert not SearchRun.objects.exists()
