"""QA on PostgreSQL with a real worker: (1) verification writers locked node -> run against the search's
run -> node (deadlock), and a database error while storing a result left the row "running"; (2) the stale
requeue re-sent queued rows every minute (duplicates doubling); (3) a run whose advancing worker died kept
its lease and nothing advanced it again; (4) lists of verifications and discoveries loaded each run's
multi-MB driver_state; (5) a running verification whose worker went silent read as "being measured"."""
from __future__ import annotations

import re
from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from kernellab.models import Discovery, RunChange, RunStatus, SearchRun, Verification, VerificationState

pytestmark = pytest.mark.django_db

RESULT = {"status": "ok", "speedup": 1.5, "backend": "replay", "reason": ""}


def _running(node, token="tok"):
    now = timezone.now()
    return Verification.objects.create(node=node, state=VerificationState.RUNNING, queue="replay", attempts=1,
                                       claim_token=token, heartbeat_at=now, queued_at=now, started_at=now)


def _run_locked_before_node_written(queries) -> bool:
    sqls = [q["sql"] for q in queries]
    lock = next((i for i, sql in enumerate(sqls)
                 if re.match(r'SELECT "kernellab_searchrun"\."id"( AS "\w+")? FROM "kernellab_searchrun"', sql)), None)
    node_write = next(i for i, sql in enumerate(sqls) if sql.startswith('UPDATE "kernellab_node"'))
    return lock is not None and lock < node_write


# ---- 1. lock order run -> node ---------------------------------------------------------------

def test_finish_locks_the_run_before_the_node(node):
    from kernellab.services.verifications import verification_finish

    verification = _running(node)
    with CaptureQueriesContext(connection) as queries:
        assert verification_finish(verification=verification, result=RESULT) is not None
    assert _run_locked_before_node_written(queries.captured_queries)


def test_fail_claim_approve_reject_lock_the_run_before_the_node(node, members):
    from kernellab.services.verifications import (
        verification_approve,
        verification_claim,
        verification_fail,
        verification_reject,
    )

    verification = _running(node)
    with CaptureQueriesContext(connection) as queries:
        assert verification_fail(verification=verification, reason="gone")
    assert _run_locked_before_node_written(queries.captured_queries)

    queued = Verification.objects.create(node=node, state=VerificationState.QUEUED, queue="replay", queued_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        assert verification_claim(verification_id=queued.pk, token="t2") is not None
    assert _run_locked_before_node_written(queries.captured_queries)
    Verification.objects.filter(pk=queued.pk).update(state=VerificationState.DONE)

    for decide in (verification_approve, verification_reject):
        pending = Verification.objects.create(node=node, state=VerificationState.PENDING, queue="replay")
        with CaptureQueriesContext(connection) as queries:
            decide(verification=pending, user=members["approver"])
        assert _run_locked_before_node_written(queries.captured_queries), decide.__name__
        Verification.objects.filter(pk=pending.pk).update(state=VerificationState.DONE)


def test_execute_tries_finishing_again_after_a_database_error(node, monkeypatch):
    import kernellab.services.verifications as verifications
    from kernellab import tasks

    monkeypatch.setattr("kernellab.services.measurement.measure_for_verification", lambda verification: (RESULT, []))
    monkeypatch.setattr(tasks.time, "sleep", lambda s: None)
    real = verifications.verification_finish
    calls = []

    def flaky(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("deadlock detected")
        return real(**kwargs)

    monkeypatch.setattr(verifications, "verification_finish", flaky)
    queued = Verification.objects.create(node=node, state=VerificationState.QUEUED, queue="replay", queued_at=timezone.now())
    assert tasks.verification_execute.apply(args=[queued.pk]).get() == "done"
    assert len(calls) == 2
    queued.refresh_from_db()
    assert queued.state == VerificationState.DONE and queued.measurement_id is not None


# ---- 2. the stale requeue sends each row once per stale period ---------------------------------

def test_requeue_stale_sends_each_queued_row_once_per_stale_period(node, settings):
    from kernellab.services.verifications import verification_requeue_stale

    settings.KERNELLAB_STALE_RUNNING_S = 900
    long_ago = timezone.now() - timedelta(hours=1)
    queued = Verification.objects.create(node=node, state=VerificationState.QUEUED, queue="replay", queued_at=long_ago)
    with mock.patch("kernellab.tasks.verification_execute.apply_async") as send:
        assert verification_requeue_stale() == 1
        assert verification_requeue_stale() == 0  # the next minute: no worker took it, no second message
        assert verification_requeue_stale() == 0
    send.assert_called_once_with(args=[queued.pk], queue="replay")
    # Once a whole stale period passes without a worker, it is sent again.
    Verification.objects.filter(pk=queued.pk).update(queued_at=long_ago)
    with mock.patch("kernellab.tasks.verification_execute.apply_async") as send:
        assert verification_requeue_stale() == 1


def test_requeue_stale_sends_a_silent_running_row_once_and_leaves_it_claimable(node, settings):
    from kernellab.services.verifications import verification_claim, verification_requeue_stale

    settings.KERNELLAB_STALE_RUNNING_S = 900
    long_ago = timezone.now() - timedelta(hours=1)
    row = _running(node)
    Verification.objects.filter(pk=row.pk).update(heartbeat_at=long_ago, queued_at=long_ago)
    with mock.patch("kernellab.tasks.verification_execute.apply_async") as send:
        assert verification_requeue_stale() == 1
        assert verification_requeue_stale() == 0
    assert send.call_count == 1
    assert verification_claim(verification_id=row.pk, token="new-worker") is not None  # still taken over


# ---- 3. runs nothing advances are woken -------------------------------------------------------

def test_a_run_whose_lease_expired_is_advanced_again_once(run):
    from kernellab.tasks import search_runs_advance_stuck

    SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.WAITING, lease_until=timezone.now() - timedelta(minutes=1))
    with mock.patch("kernellab.tasks.search_run_advance.apply_async") as advance:
        assert search_runs_advance_stuck() == 1
        assert search_runs_advance_stuck() == 0  # not one more message a minute
    advance.assert_called_once_with(args=[run.pk], queue="search")


def test_live_lease_ended_runs_and_recently_changed_runs_are_left_alone(run):
    from kernellab.tasks import search_runs_advance_stuck

    now = timezone.now()
    SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_until=now + timedelta(minutes=5))
    with mock.patch("kernellab.tasks.search_run_advance.apply_async") as advance:
        assert search_runs_advance_stuck() == 0
        SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.FINISHED, lease_until=now - timedelta(minutes=5))
        assert search_runs_advance_stuck() == 0
        SearchRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease_until=None, updated_at=now - timedelta(hours=1))
        RunChange.objects.create(run=run, seq=10_000, kind="node", payload={})
        assert search_runs_advance_stuck() == 0  # it changed a moment ago
        RunChange.objects.filter(run=run).update(created_at=now - timedelta(hours=1))
        assert search_runs_advance_stuck() == 1  # running, no lease, silent for an hour
        assert search_runs_advance_stuck() == 0
    advance.assert_called_once_with(args=[run.pk], queue="search")


def test_the_beat_schedule_wakes_stuck_runs():
    from kernellab.celery import app

    assert any(entry["task"] == "kernellab.tasks.search_runs_advance_stuck" for entry in app.conf.beat_schedule.values())


# ---- 4. lists do not load the driver's state ---------------------------------------------------

def test_verification_and_discovery_lists_do_not_select_driver_state(node, workspace):
    from kernellab.selectors.discoveries import discovery_list
    from kernellab.selectors.verifications import verification_queue

    SearchRun.objects.filter(pk=node.run_id).update(driver_state={"big": "x" * 1000})
    _running(node)
    Discovery.objects.create(node=node, parent_speedup=1.0, child_speedup=2.0, auto=True)
    for queryset in (verification_queue(workspace=workspace), discovery_list(workspaces=[workspace])):
        assert "driver_state" not in str(queryset.query)
        with CaptureQueriesContext(connection) as queries:
            rows = list(queryset)
            assert rows and rows[0].node.run.problem.name
        assert not any("driver_state" in q["sql"] for q in queries.captured_queries)


# ---- 5. a silent worker is named in the wait reason --------------------------------------------

def test_wait_reason_says_a_running_verification_worker_went_silent(node, settings):
    from kernellab.selectors.backends import run_wait_reason

    settings.KERNELLAB_STALE_RUNNING_S = 900
    SearchRun.objects.filter(pk=node.run_id).update(status=RunStatus.WAITING)
    run = SearchRun.objects.get(pk=node.run_id)
    row = _running(node)
    assert run_wait_reason(run=run) == "1 being measured."
    Verification.objects.filter(pk=row.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=20))
    reason = run_wait_reason(run=run)
    assert "being measured" not in reason
    assert "last heard 20 minutes ago" in reason and "retried" in reason
