"""Real runs (LLM generator and LLM surrogate, replay backend, bundled saxpy) against a stub
OpenAI-compatible server that answers with malformed answers: no answer may end a run or escape a
worker, and every unusable answer leaves a readable reason on its node."""
import pytest
from django.utils.html import escape
from search_engine.saved_state import SavedSearch

from kernellab.config import LLMEndpoint
from kernellab.models import Forecast, Node, RunStatus
from kernellab.services.runs import run_create
from kernellab.services.search import run_advance
from tests.llm_stub import (AnswerCatalogue, StubServer, fuzz_runs, patient_llm_clients, readable,
                            recorded_saxpy_variants)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def patient():
    """The catalogues' HTTP errors and time-outs, drawn at random, may come three in a row, which pauses a run (its
    endpoint failing): these runs' clients never give up, so that every answer is recorded (see patient_llm_clients)."""
    with patient_llm_clients():
        yield


@pytest.fixture
def stub(settings):
    # Six variants: their compile checks are cached after the first run of this test anywhere.
    with StubServer(AnswerCatalogue(seed=18, variants=recorded_saxpy_variants()[:6])) as server:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=server.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=1.0, max_retries=0)
        yield server


def test_a_thousand_malformed_answers_fail_no_run_and_each_leaves_a_reason_on_its_node(saxpy, stub, members):
    result = fuzz_runs(problem=saxpy, user=members["engineer"], stub=stub, min_answers=1000, llm_call_budget=50)
    assert result["answers"] >= 1000 and result["malformed_answers"] >= 600
    assert result["worker_crashes"] == 0, result["crash_examples"]
    assert result["failed_runs"] == 0, result["failed_run_examples"]
    assert result["unreadable_reasons"] == 0, result["unreadable_examples"]
    # Each unusable answer is one failed proposal on the node it was to expand, or one abstention.
    assert result["generator_failures_recorded"] == result["generator_malformed"]
    assert result["surrogate_abstentions_recorded"] == result["surrogate_malformed"]
    kinds = result["answer_kinds"]
    assert result["surrogate_answers"] >= 100
    served = lambda *names: sum(kinds.get(f"{path}:{name}", 0) for path in ("generator", "surrogate") for name in names)
    for names in (("message-null",), ("choices-string",), ("tool-function-null",), ("content-number",),
                  ("bin-infinity", "bin-nan", "bin-1e400"), ("body-nested-100k", "arguments-nested-100k"),
                  ("body-cut-off", "code-cut-off"), ("content-huge", "body-over-cap"), ("slow",), ("http-500",)):
        assert served(*names), f"the fuzz served no {' or '.join(names)} answer"


def test_a_run_whose_generator_always_fails_finishes_when_its_llm_calls_are_spent(saxpy, settings, members):
    catalogue = AnswerCatalogue(seed=1, variants=recorded_saxpy_variants()[:1], good_share=0.0)
    with StubServer(catalogue) as server:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=server.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=1.0, max_retries=0)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=30)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED
    # Every call failed: the status says so, with the last call's reason.
    assert run.status_reason.startswith("the budget of 30 LLM calls is spent and every call failed, the last because ")
    assert len(server.served) == 30 and run.llm_calls == 30
    root = Node.objects.get(run=run, origin="root")
    failures = root.failed_proposals  # what the node panel shows
    assert len(failures) >= 30 and all(readable(f["reason"]) for f in failures)


def test_the_run_page_shows_the_llm_calls_spent_and_the_node_its_failed_proposals(saxpy, settings, members, client):
    with StubServer(AnswerCatalogue(seed=2, variants=recorded_saxpy_variants()[:1], good_share=0.0)) as server:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=server.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=1.0, max_retries=0)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=8)
    client.force_login(members["viewer"])
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "LLM calls" in page and "8 / 8" in page
    root = Node.objects.get(run=run, origin="root")
    panel = client.get(f"/runs/{run.pk}/nodes/{root.key}/").content.decode()
    assert "Failed proposals (8)" in panel
    reasons = [f["reason"] for f in root.failed_proposals]
    assert escape(reasons[-1]) in panel


def test_an_advance_continues_the_run_after_letting_go_of_its_lease(saxpy, settings, members, monkeypatch):
    """Before, the follow-up advance was queued while the lease was still held, found it taken and
    was dropped: a run stepping past one advance sat in "running" for good."""
    from kernellab.services import search

    monkeypatch.setattr(search, "STEPS_PER_ADVANCE", 1)
    with StubServer(AnswerCatalogue(seed=3, variants=recorded_saxpy_variants()[:1], good_share=0.0)) as server:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=server.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=1.0, max_retries=0)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=12)
    run.refresh_from_db()
    assert run.status == RunStatus.FINISHED, (run.status, run.status_reason)
    assert SavedSearch(run.driver_state).step >= 3
    assert run_advance(run_id=run.pk) == "run is finished"


def test_a_run_whose_budget_is_spent_while_measurements_are_out_waits_and_says_why(saxpy, settings, members):
    variants = recorded_saxpy_variants()[:4]
    with StubServer(AnswerCatalogue(seed=4, variants=variants, good_share=1.0)) as server:
        settings.KERNELLAB_LLM = LLMEndpoint(base_url=server.base_url, api_key="stub", surrogate_model="stub",
                                             generator_model="stub", timeout_s=1.0, max_retries=0)
        run = run_create(problem=saxpy, user=members["engineer"], generator="llm", surrogate="roofline",
                         backend="replay", gpu_budget=5, llm_call_budget=4, approval_mode="manual",
                         children_per_step=4)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    assert "budget of 4 LLM calls is spent" in run.status_reason and "GPU" in run.status_reason
    assert not Forecast.objects.filter(node__run=run, abstained=True).exists()
