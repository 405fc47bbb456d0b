"""A run whose LLM endpoint is unreachable, or whose step runs past the worker's soft time limit, is paused
with the reason on the run (never left "running" with nothing queued, never burning its LLM budget)."""
import pytest
from celery.exceptions import SoftTimeLimitExceeded

from kernellab.config import LLMEndpoint
from kernellab.models import RunStatus, SearchRun
from kernellab.services.runs import run_create, run_transition
from kernellab.services.search import run_advance

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

DEAD = "http://127.0.0.1:9"


@pytest.fixture
def dead_endpoint(settings):
    settings.KERNELLAB_LLM = LLMEndpoint(base_url=DEAD, api_key="x", surrogate_model="m", generator_model="m",
                                         timeout_s=2.0, max_retries=1)


def test_a_run_with_an_unreachable_llm_generator_pauses_saying_so(saxpy, dead_endpoint, members, client):
    run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                     backend="replay", gpu_budget=5, llm_call_budget=500, children_per_step=1)
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    # A clause after the status ("Paused"), as every status reason is: what happened, then what to check.
    assert run.status_reason == f"the LLM endpoint {DEAD} did not answer: Connection error; check OPENAI_BASE_URL and that the server runs"
    assert run.llm_calls == 3  # three calls (two attempts each), not the budget of 500
    client.force_login(members["viewer"])
    assert "check OPENAI_BASE_URL" in client.get(f"/runs/{run.pk}/").content.decode()


def test_a_run_with_an_unreachable_llm_surrogate_pauses_instead_of_measuring_on(saxpy, dead_endpoint, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="llm",
                     backend="replay", gpu_budget=20, llm_call_budget=500)
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED, (run.status, run.status_reason)
    assert f"the LLM endpoint {DEAD} did not answer" in run.status_reason
    assert run.llm_calls <= 6


class NeverAnswers:
    """The openai client of an endpoint that accepts and never replies, until the worker's soft limit fires."""

    def __init__(self, *args, **kwargs):
        self.chat = self.completions = self

    def create(self, **kwargs):
        raise SoftTimeLimitExceeded()


def test_a_step_past_the_soft_time_limit_pauses_the_run_with_what_it_waited_for(saxpy, dead_endpoint, members,
                                                                               monkeypatch):
    import search_engine.llm_client as llm_client

    monkeypatch.setattr(llm_client.openai, "OpenAI", NeverAnswers)
    run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                     backend="replay", gpu_budget=5, llm_call_budget=500)
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED
    assert run.status_reason.startswith("a step ran past its time limit: ")
    assert DEAD in run.status_reason and "LLM endpoint" in run.status_reason
    assert run.lease_until is None
    # Resumed, it steps again (and pauses again here, the endpoint still never answering).
    run_transition(run=run, user=members["engineer"], action="resume")
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run_advance(run_id=run.pk) == "run is paused"


def test_the_step_task_pauses_the_run_when_the_limit_fires_outside_the_step(saxpy, dead_endpoint, members,
                                                                             monkeypatch):
    from kernellab import tasks
    from kernellab.services import search

    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=5, approval_mode="manual")
    SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)

    def late(**kw):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(search, "run_advance", late)
    assert tasks.search_run_advance.run(run.pk) == "timed out"
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.status_reason.startswith("a step ran past its time limit: ")
