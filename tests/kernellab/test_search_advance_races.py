"""An advance that races a person's pause or cancel, and one that meets a transient database error
(deterministic: the race is forced by monkeypatching the step, the feed or the wake)."""
import pytest
from django.db import OperationalError

from kernellab.models import RunStatus, SearchRun, Verification, VerificationState
from kernellab.services import runs as runs_service
from kernellab.services import search
from kernellab.services.runs import run_create, run_transition
from kernellab.services.search import run_advance

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture
def held(monkeypatch):
    """Verifications sent to the GPU worker's queue and advances enqueued, kept here instead of run."""
    from kernellab import tasks

    sent = {"gpu": [], "advance": []}
    monkeypatch.setattr(tasks.verification_execute, "apply_async", lambda args, queue=None, **kw: sent["gpu"].append(args[0]))
    monkeypatch.setattr(tasks.search_run_advance, "apply_async",
                        lambda args, queue=None, **kw: sent["advance"].append((args[0], kw.get("countdown"))))
    return sent


@pytest.fixture
def running(saxpy, members):
    run = run_create(problem=saxpy, user=members["engineer"], generator="template", surrogate="roofline",
                     backend="replay", gpu_budget=8, children_per_step=2, max_gpu_per_step=2, start=False)
    SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    search._clear_transient_errors(run.pk)
    yield SearchRun.objects.get(pk=run.pk)
    search._clear_transient_errors(run.pk)


def _by_person(run_id, action):
    run_transition(run=SearchRun.objects.get(pk=run_id), action=action, reason=f"{action} by a person")


def _patch_step(monkeypatch, after):
    from search_engine.driver import SearchDriver

    original = SearchDriver.step
    calls = {"n": 0}

    def step(self, *a, **kw):
        report = original(self, *a, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            after()
        return report

    monkeypatch.setattr(SearchDriver, "step", step)


def _waiting_run(running, held):
    assert run_advance(run_id=running.pk) == "waiting"
    run = SearchRun.objects.get(pk=running.pk)
    assert run.status == RunStatus.WAITING
    return run


def test_a_waiting_run_paused_while_its_feed_loads_stays_paused_and_resumes(running, held, monkeypatch):
    run = _waiting_run(running, held)
    original = search._feed_outside_events

    def feed_then_pause(*a, **kw):
        n = original(*a, **kw)
        _by_person(run.pk, "pause")
        return n

    monkeypatch.setattr(search, "_feed_outside_events", feed_then_pause)
    assert run_advance(run_id=run.pk) == "run is paused"
    run.refresh_from_db()
    assert run.status == RunStatus.PAUSED and run.status_reason == "pause by a person"
    run_transition(run=run, action="resume")  # still resumable
    assert SearchRun.objects.get(pk=run.pk).status == RunStatus.RUNNING


@pytest.mark.parametrize("action, status", [("pause", RunStatus.PAUSED), ("cancel", RunStatus.CANCELLED)])
def test_a_run_paused_or_cancelled_just_before_its_wake_is_left_as_the_person_set_it(running, held, monkeypatch,
                                                                                     action, status):
    run = _waiting_run(running, held)
    original = runs_service.run_transition

    def transition(*, run, action, **kw):
        if action == "wake":
            _by_person(run.pk, action_by_person)
        return original(run=run, action=action, **kw)

    action_by_person = action
    monkeypatch.setattr(runs_service, "run_transition", transition)
    assert run_advance(run_id=run.pk) == f"run is {status}"
    run.refresh_from_db()
    assert run.status == status and run.status_reason == f"{action} by a person"
    assert run.lease_until is None


def test_a_run_cancelled_during_a_step_sends_nothing_to_the_gpu(running, held, monkeypatch):
    _patch_step(monkeypatch, lambda: _by_person(running.pk, "cancel"))
    assert run_advance(run_id=running.pk) == "run is cancelled"
    run = SearchRun.objects.get(pk=running.pk)
    assert run.status == RunStatus.CANCELLED
    assert held["gpu"] == []
    live = Verification.objects.filter(node__run=run).exclude(state=VerificationState.CANCELLED)
    assert not live.exists()
    assert held["advance"] == []


def test_a_run_paused_during_a_step_keeps_the_step_undone_and_asks_again_once_resumed(running, held, monkeypatch):
    before = SearchRun.objects.get(pk=running.pk).driver_state
    _patch_step(monkeypatch, lambda: _by_person(running.pk, "pause"))
    assert run_advance(run_id=running.pk) == "run is paused"
    run = SearchRun.objects.get(pk=running.pk)
    assert run.status == RunStatus.PAUSED
    assert held["gpu"] == [] and not Verification.objects.filter(node__run=run).exists()
    # the step is not saved: its requests are not claimed by a saved state that nobody queued
    assert (run.driver_state or {}).get("step", 0) == (before or {}).get("step", 0)
    monkeypatch.undo()
    from kernellab import tasks

    monkeypatch.setattr(tasks.verification_execute, "apply_async", lambda args, queue=None, **kw: held["gpu"].append(args[0]))
    monkeypatch.setattr(tasks.search_run_advance, "apply_async", lambda *a, **kw: None)
    run_transition(run=run, action="resume")
    assert run_advance(run_id=run.pk) == "waiting"
    assert held["gpu"], "the resumed run asks for its measurements again"
    assert SearchRun.objects.get(pk=run.pk).status == RunStatus.WAITING


def test_a_transient_database_error_retries_the_advance_instead_of_failing_the_run(running, held, monkeypatch):
    def deadlock():
        raise OperationalError("deadlock detected")

    _patch_step(monkeypatch, deadlock)
    assert run_advance(run_id=running.pk) == search.TRANSIENT_OUTCOME
    run = SearchRun.objects.get(pk=running.pk)
    assert run.status == RunStatus.RUNNING and run.lease_until is None
    assert held["advance"] == [(run.pk, search.TRANSIENT_RETRY_S)]
    assert held["gpu"] == []  # the failed step's writes were rolled back
    assert run_advance(run_id=run.pk) == "waiting"  # the retry (the step now succeeds) carries on
    assert held["gpu"]


def test_a_database_that_keeps_failing_fails_the_run_after_a_bounded_number_of_tries(running, held, monkeypatch):
    from search_engine.driver import SearchDriver

    def deadlock(self, *a, **kw):
        raise OperationalError("deadlock detected")

    monkeypatch.setattr(SearchDriver, "step", deadlock)
    for _ in range(search.TRANSIENT_DB_ERRORS_MAX - 1):
        assert run_advance(run_id=running.pk) == search.TRANSIENT_OUTCOME
        assert SearchRun.objects.get(pk=running.pk).status == RunStatus.RUNNING
    assert run_advance(run_id=running.pk) == "failed"
    run = SearchRun.objects.get(pk=running.pk)
    assert run.status == RunStatus.FAILED and "database errors in a row" in run.status_reason
    assert run.lease_until is None
    assert len(held["advance"]) == search.TRANSIENT_DB_ERRORS_MAX - 1
