import pytest

from kernellab.models import ApprovalMode, NodeState, RunStatus, Verification, VerificationState
from kernellab.services import IllegalTransition, ServiceError
from kernellab.services.runs import run_transition
from kernellab.services.verifications import (
    new_claim_token,
    verification_approve,
    verification_claim,
    verification_finish,
    verification_reject,
    verification_request,
)

OK_RESULT = {"status": "ok", "speedup": 1.7, "reason": "", "backend": "replay", "reference": {"median_ms": 1.0}, "candidate": {"median_ms": 0.59}}


def manual(run):
    run.approval_mode = ApprovalMode.MANUAL
    run.save()
    return run


def test_a_manual_request_waits_for_an_approver(node, members):
    manual(node.run)
    verification = verification_request(node=node, user=members["engineer"])
    node.refresh_from_db()
    assert verification.state == VerificationState.PENDING
    assert node.state == NodeState.AWAITING_APPROVAL


def test_an_automatic_request_is_queued_at_once(node, members, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    node.run.backend = "cupy"  # measured on a real GPU: routed to the target model's queue
    node.run.save()
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda args, queue: sent.append((args, queue)))
    with django_capture_on_commit_callbacks(execute=True):
        verification = verification_request(node=node, policy_reason="uncertain forecast")
    assert verification.state == VerificationState.QUEUED
    assert sent == [([verification.pk], "gpu.h200")]


def test_approve_then_claim_then_finish_stores_one_measurement(node, members):
    manual(node.run)
    verification = verification_request(node=node, user=members["engineer"])
    verification_approve(verification=verification, user=members["approver"])
    claimed = verification_claim(verification_id=verification.pk, token=new_claim_token())
    assert claimed.state == VerificationState.RUNNING and claimed.attempts == 1
    measurement = verification_finish(verification=claimed, result=OK_RESULT)
    node.refresh_from_db()
    assert measurement.speedup == 1.7
    assert node.state == NodeState.MEASURED and node.speedup == 1.7
    assert verification_finish(verification=claimed, result=OK_RESULT) is None  # never twice


def test_a_finished_verification_cannot_be_claimed_again(node, members):
    verification = verification_request(node=node, user=members["engineer"])
    token = new_claim_token()
    claimed = verification_claim(verification_id=verification.pk, token=token)
    verification_finish(verification=claimed, result=OK_RESULT)
    assert verification_claim(verification_id=verification.pk, token=token) is None
    assert Verification.objects.get(pk=verification.pk).attempts == 1


def test_a_second_worker_cannot_take_a_live_claim(node, members):
    verification = verification_request(node=node, user=members["engineer"])
    first = verification_claim(verification_id=verification.pk, token="worker-a")
    assert first is not None
    assert verification_claim(verification_id=verification.pk, token="worker-b") is None


def test_a_redelivered_message_takes_over_its_own_dead_attempt(node, members):
    verification = verification_request(node=node, user=members["engineer"])
    first = verification_claim(verification_id=verification.pk, token="message-1")
    again = verification_claim(verification_id=verification.pk, token="message-1")
    assert again.attempts == 2
    assert verification_finish(verification=first, result=OK_RESULT) is None  # the dead attempt lost its claim
    assert verification_finish(verification=again, result=OK_RESULT) is not None


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_decided_verification_cannot_be_decided_again(node, members, action):
    manual(node.run)
    verification = verification_request(node=node, user=members["engineer"])
    verification_reject(verification=verification, user=members["approver"], reason="not worth it")
    with pytest.raises(IllegalTransition, match="rejected, so it cannot be"):
        (verification_approve if action == "approve" else verification_reject)(verification=verification, user=members["approver"])
    verification.refresh_from_db()
    assert verification.state == VerificationState.REJECTED
    node.refresh_from_db()
    assert node.state == NodeState.REJECTED


def test_a_node_cannot_have_two_open_verifications(node, members):
    manual(node.run)
    verification_request(node=node, user=members["engineer"])
    with pytest.raises(ServiceError, match="already has a verification"):
        verification_request(node=node, user=members["engineer"])
    assert Verification.objects.filter(node=node).count() == 1


@pytest.mark.parametrize(
    "start,action,end",
    [
        (RunStatus.CREATED, "start", RunStatus.RUNNING),
        (RunStatus.RUNNING, "pause", RunStatus.PAUSED),
        (RunStatus.PAUSED, "resume", RunStatus.RUNNING),
        (RunStatus.WAITING, "pause", RunStatus.PAUSED),
        (RunStatus.PAUSED, "cancel", RunStatus.CANCELLED),
    ],
)
def test_legal_run_transitions(run, members, start, action, end):
    from kernellab.services.workers import worker_heartbeat_record

    worker_heartbeat_record(hostname="gpu0@box", queues=["gpu.h200"])  # a run starts only if it can be measured
    run.status, run.backend = start, "cupy"
    run.save()
    assert run_transition(run=run, action=action, user=members["engineer"]).status == end


@pytest.mark.parametrize(
    "start,action",
    [(RunStatus.CREATED, "resume"), (RunStatus.CANCELLED, "start"), (RunStatus.FINISHED, "pause"), (RunStatus.RUNNING, "resume"), (RunStatus.CANCELLED, "resume")],
)
def test_illegal_run_transitions_change_nothing(run, members, start, action):
    run.status = start
    run.save()
    seq_before = run.change_seq
    with pytest.raises(IllegalTransition, match="cannot"):
        run_transition(run=run, action=action, user=members["engineer"])
    run.refresh_from_db()
    assert run.status == start and run.change_seq == seq_before


def test_every_change_gets_the_next_sequence_number(node, members):
    manual(node.run)
    verification = verification_request(node=node, user=members["engineer"])
    verification_reject(verification=verification, user=members["approver"])
    seqs = list(node.run.changes.values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_without_redis_or_a_gpu_an_automatic_backend_runs_on_recorded_data(problem, members, settings, monkeypatch):
    from kernellab.services.runs import run_create

    settings.KERNELLAB_REDIS_URL = None
    monkeypatch.setattr("gpu_runner.gpu_present", lambda: False)
    run = run_create(problem=problem, user=members["engineer"], generator="transform", backend="auto", start=False)
    assert run.backend == "replay" and run.gpu_queue == "replay"
