"""QA3 deploy finding 4: a GPU worker SIGKILLed mid-measurement left its verification "being measured" for
KERNELLAB_STALE_RUNNING_S (15 minutes), even when the same worker was back within seconds.

A claim now names its worker (Verification.claimed_by, the Celery hostname). A claim whose worker started again
under its name, or has not beaten for three heartbeats, is held by nobody: the run page says so, the beat (and
the restarted worker, on worker_ready) sends it back to the queue at once, and the next message takes it over.
A worker that was only slow and finishes first leaves that message nothing to do: measured and stored once.
"""
from datetime import timedelta
from types import SimpleNamespace
from unittest import mock

import pytest
from django.utils import timezone

from kernellab.models import Measurement, RunStatus, SearchRun, Verification, VerificationState, WorkerHeartbeat
from kernellab.selectors.backends import run_wait_reason
from kernellab.services.verifications import (verification_claim, verification_finish, verification_request,
                                              verification_requeue_stale)

pytestmark = pytest.mark.django_db

RESULT = {"status": "ok", "speedup": 1.5, "backend": "cupy", "reason": ""}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings):
    settings.KERNELLAB_STALE_RUNNING_S = 900
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    send = mock.Mock()
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", send)
    return send


def _ago(seconds):
    return timezone.now() - timedelta(seconds=seconds)


def _claimed(node, members, *, worker="gpu0@box", claimed_s_ago=180):
    SearchRun.objects.filter(pk=node.run_id).update(status=RunStatus.WAITING, backend="cupy", target_gpu="h200")
    node.run.refresh_from_db()
    verification = verification_request(node=node, user=members["engineer"])
    claimed = verification_claim(verification_id=verification.pk, token="message-1", worker=worker)
    assert claimed is not None and claimed.claimed_by == worker
    at = _ago(claimed_s_ago)
    Verification.objects.filter(pk=claimed.pk).update(started_at=at, heartbeat_at=at, queued_at=at - timedelta(seconds=1))
    claimed.refresh_from_db()
    return claimed


def _heartbeat(hostname="gpu0@box", *, started_s_ago=3600, seen_s_ago=5):
    return WorkerHeartbeat.objects.update_or_create(hostname=hostname, defaults={
        "queues": ["gpu.h200"], "started_at": _ago(started_s_ago), "last_seen": _ago(seen_s_ago)})[0]


def _run(node):
    return SearchRun.objects.get(pk=node.run_id)


def test_a_claim_held_by_a_live_worker_is_being_measured_and_left_alone(node, members, no_broker):
    claimed = _claimed(node, members, claimed_s_ago=600)  # a long measurement: its worker still beats
    _heartbeat(seen_s_ago=5)
    assert run_wait_reason(run=_run(node)) == "1 being measured."
    assert verification_requeue_stale() == 0
    no_broker.assert_not_called()
    assert verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu1@box") is None


def test_a_fresh_claim_is_not_judged_before_its_worker_could_beat(node, members):
    claimed = _claimed(node, members, claimed_s_ago=10)  # no heartbeat row (yet): too early to tell
    assert run_wait_reason(run=_run(node)) == "1 being measured."
    assert verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu1@box") is None


def test_a_claim_whose_worker_went_silent_is_named_requeued_once_and_taken_over(node, members, no_broker):
    claimed = _claimed(node, members, claimed_s_ago=180)
    _heartbeat(seen_s_ago=120)  # three heartbeats are 45 s; KERNELLAB_STALE_RUNNING_S is 900
    reason = run_wait_reason(run=_run(node))
    assert "being measured" not in reason
    assert reason == "1 verification's worker (gpu0@box) stopped; it will be requeued."
    assert verification_requeue_stale() == 1
    assert verification_requeue_stale() == 0  # once per claim, not once a minute
    no_broker.assert_called_once_with(args=[claimed.pk], queue="gpu.h200")
    assert run_wait_reason(run=_run(node)) == ("1 verification's worker (gpu0@box) stopped; it was requeued and "
                                               "waits for a worker.")
    taken = verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu1@box")
    assert taken is not None and (taken.attempts, taken.claimed_by, taken.claim_token) == (2, "gpu1@box", "message-2")
    assert verification_finish(verification=claimed, result=RESULT) is None  # the lost claim stores nothing
    assert verification_finish(verification=taken, result=RESULT) is not None
    assert Measurement.objects.filter(kernel=node.kernel).count() == 1


def test_a_slow_worker_that_finishes_before_the_requeued_message_is_measured_once(node, members, no_broker):
    claimed = _claimed(node, members, claimed_s_ago=180)
    _heartbeat(seen_s_ago=120)  # its heartbeat thread stalled, but the measurement went on
    assert verification_requeue_stale() == 1
    assert verification_finish(verification=claimed, result=RESULT) is not None
    assert verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu1@box") is None
    row = Verification.objects.get(pk=claimed.pk)
    assert (row.state, row.attempts) == (VerificationState.DONE, 1)
    assert Measurement.objects.filter(kernel=node.kernel).count() == 1


def test_a_claim_of_a_worker_that_started_again_under_its_name_is_taken_over_at_once(node, members):
    claimed = _claimed(node, members, claimed_s_ago=20)
    _heartbeat(started_s_ago=5, seen_s_ago=1)  # killed, and back 15 s later: it beats, but it is not the claimant
    assert run_wait_reason(run=_run(node)) == "1 verification's worker (gpu0@box) stopped; it will be requeued."
    taken = verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu0@box")
    assert taken is not None and taken.attempts == 2


def test_a_restarted_worker_requeues_what_its_earlier_process_held_when_it_is_ready(node, members, monkeypatch,
                                                                                    no_broker):
    from kernellab import celery as kernellab_celery

    claimed = _claimed(node, members, claimed_s_ago=20)
    other = _claimed_elsewhere(node, members)
    _heartbeat(started_s_ago=3600, seen_s_ago=10)  # the row the killed process left behind
    monkeypatch.setattr("kernellab.services.workers.worker_heartbeats_start", lambda **kwargs: None)
    consumer = SimpleNamespace(hostname="gpu0@box", app=kernellab_celery.app)
    kernellab_celery._heartbeats_start(sender=consumer)
    no_broker.assert_called_once_with(args=[claimed.pk], queue="gpu.h200")  # not the other worker's
    heartbeat = WorkerHeartbeat.objects.get(hostname="gpu0@box")
    assert heartbeat.started_at > claimed.started_at  # this process's row, not the dead one's
    taken = verification_claim(verification_id=claimed.pk, token="message-2", worker="gpu0@box")
    assert taken is not None and taken.attempts == 2
    assert verification_claim(verification_id=other.pk, token="message-3", worker="gpu0@box") is None


def _claimed_elsewhere(node, members):
    """Another node's verification, claimed 20 s ago by a worker that is alive."""
    from kernellab.models import Node, NodeState

    twin = Node.objects.create(run=node.run, key="n2", parent=node.parent, kernel=node.run.problem.reference, depth=1,
                               state=NodeState.FORECAST)
    row = _claimed(twin, members, worker="gpu1@box", claimed_s_ago=20)
    _heartbeat("gpu1@box", seen_s_ago=2)
    return row
