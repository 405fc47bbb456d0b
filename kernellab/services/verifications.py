"""Verification: the database row is the truth about a GPU measurement request.

The Celery task only moves a row along. Claiming is a conditional UPDATE (whoever changes the
row first owns the attempt) and finishing is conditional on the claim token and attempt, so a
redelivered or duplicated task can never finish a verification twice."""
from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from kernellab.models import (
    VERIFICATION_TRANSITIONS,
    ApprovalMode,
    Measurement,
    Node,
    NodeState,
    RunChange,
    RunStatus,
    SearchRun,
    Verification,
    VerificationState,
)
from kernellab.services.access import access_require
from kernellab.services.changes import change_record, node_changed
from kernellab.services.errors import IllegalTransition, ServiceError
from kernellab.services.reference_measurements import reference_measurement_keep

log = logging.getLogger(__name__)

OPEN_STATES = {
    VerificationState.PENDING,
    VerificationState.APPROVED,
    VerificationState.QUEUED,
    VerificationState.RUNNING,
}


# A run in one of these states is never advanced again: no search reads its verifications any more.
RUN_ENDED_STATES = (RunStatus.FINISHED, RunStatus.CANCELLED, RunStatus.FAILED)
# A verification in one of these states took the GPU (a failed one, its attempts).
GPU_TAKEN_STATES = (VerificationState.DONE, VerificationState.FAILED)


_PAST = {"approve": "approved", "reject": "rejected", "enqueue": "queued", "claim": "claimed", "finish": "finished", "fail": "failed"}


def _transition(verification: Verification, action: str) -> None:
    allowed, target = VERIFICATION_TRANSITIONS[action]
    if verification.state not in allowed:
        raise IllegalTransition(
            f"Verification {verification.pk} is {verification.get_state_display().lower()}, so it cannot be {_PAST[action]}."
        )
    verification.state = target


def _node_set(node: Node, state: str, reason: str = "") -> None:
    node.state = state
    node.state_reason = reason
    node.save(update_fields=["state", "state_reason", "updated_at"])
    node_changed(node=node)


def _lock_run(run_id: int | None) -> None:
    """Take the run's row lock first. Every writer that touches a node and then the run (node_changed
    bumps the run's change_seq) takes run -> node, the order the search's flush uses; node -> run
    against it deadlocks on PostgreSQL. Call at the start of the transaction."""
    if run_id is not None:
        list(SearchRun.objects.select_for_update().filter(pk=run_id).order_by().values_list("pk", flat=True))


def _run_id_of(verification_pk: int) -> int | None:
    return Verification.objects.filter(pk=verification_pk).values_list("node__run_id", flat=True).first()


def _verification_changed(verification: Verification) -> None:
    change_record(
        run=verification.node.run,
        kind="verification",
        payload={
            "id": verification.pk,
            "node": verification.node.key,
            "state": verification.state,
            "progress": verification.progress,
            "attempts": verification.attempts,
        },
    )


@transaction.atomic
def verification_request(*, node: Node, user=None, policy_reason: str = "") -> Verification:
    """Ask for a GPU measurement of a node: by a person (user) or by the search policy (reason)."""
    _lock_run(node.run_id)
    run = node.run
    if user is not None:
        access_require(user=user, workspace=run.workspace, action="request-verification")
    if node.kernel_id is None:
        raise ServiceError("This node has no kernel to measure.")
    if node.state in {NodeState.FAILED_COMPILE}:
        raise ServiceError("This node's kernel does not compile; there is nothing to measure.")
    if Verification.objects.filter(node=node, state__in=OPEN_STATES).exists():
        raise ServiceError("This node already has a verification under way.")
    verification = Verification.objects.create(
        node=node,
        requested_by=user,
        requested_by_policy=policy_reason[:200],
        queue=run.gpu_queue,
    )
    if run.approval_mode == ApprovalMode.MANUAL:
        _node_set(node, NodeState.AWAITING_APPROVAL)
        _verification_changed(verification)
        return verification
    _transition(verification, "approve")
    verification.decided_at = timezone.now()
    verification.save()
    _enqueue(verification)
    return verification


def _already_measured(node: Node, reason: str) -> Verification | None:
    """What the search gets instead of a second GPU measurement of the same kernel in this run.

    The node's own finished verification (a person asked first, and it finished before the policy
    asked) is returned as it is; a finished one of another node with the same kernel (same source,
    launch and options, so the same Kernel row, in the same run, so the same backend and GPU) is
    reused as this node's measurement. Either way the run is woken to read it."""
    own = Verification.objects.filter(node=node, state=VerificationState.DONE, measurement__isnull=False).last()
    if own is not None:
        _wake_run(node.run_id)
        return own
    twin = (Verification.objects.filter(node__run_id=node.run_id, node__kernel_id=node.kernel_id,
                                        state=VerificationState.DONE, measurement__isnull=False)
            .exclude(node=node).select_related("measurement", "node").last())
    if twin is None:
        return None
    now = timezone.now()
    verification = Verification.objects.create(
        node=node, requested_by_policy=reason[:200], queue=node.run.gpu_queue, state=VerificationState.DONE,
        decided_at=now, finished_at=now, measurement=twin.measurement,
        progress=f"reused node {twin.node.key}'s measurement"[:120],
    )
    _node_measured(node, twin.measurement)
    _verification_changed(verification)
    _wake_run(node.run_id)
    return verification


@transaction.atomic
def verification_enqueue_for_policy(*, node: Node, reason: str) -> Verification:
    """The search asks for a measurement that needs no approval (automatic mode, or approved)."""
    _lock_run(node.run_id)
    open_row = Verification.objects.filter(node=node, state__in=OPEN_STATES).first()
    if open_row is not None:
        return open_row
    measured = _already_measured(node, reason)
    if measured is not None:
        return measured
    verification = Verification.objects.create(
        node=node, requested_by_policy=reason[:200], queue=node.run.gpu_queue, state=VerificationState.APPROVED,
        decided_at=timezone.now(),
    )
    _enqueue(verification)
    return verification


@transaction.atomic
def verification_pending_for_policy(*, node: Node, reason: str) -> Verification:
    """The search asks for a measurement in manual mode: it waits for an approver."""
    _lock_run(node.run_id)
    open_row = Verification.objects.filter(node=node, state__in=OPEN_STATES).first()
    if open_row is not None:
        return open_row
    measured = _already_measured(node, reason)
    if measured is not None:
        return measured
    verification = Verification.objects.create(node=node, requested_by_policy=reason[:200], queue=node.run.gpu_queue)
    _node_set(node, NodeState.AWAITING_APPROVAL, reason)
    _verification_changed(verification)
    return verification


def _enqueue(verification: Verification) -> None:
    _transition(verification, "enqueue")
    verification.queued_at = timezone.now()
    verification.save()
    _node_set(verification.node, NodeState.QUEUED)
    _verification_changed(verification)
    from kernellab.tasks import verification_execute

    pk, queue = verification.pk, verification.queue
    transaction.on_commit(lambda: _publish(verification_execute, pk, queue))


@transaction.atomic
def verification_approve(*, verification: Verification, user) -> Verification:
    _lock_run(_run_id_of(verification.pk))
    verification = Verification.objects.select_for_update().select_related("node__run__problem__workspace").defer("node__run__driver_state").get(pk=verification.pk)
    access_require(user=user, workspace=verification.node.run.workspace, action="approve")
    _transition(verification, "approve")
    verification.approver = user
    verification.decided_at = timezone.now()
    verification.save()
    _enqueue(verification)
    # The search learns of the approval now, not when the measurement ends: it may go on meanwhile.
    _wake_run(verification.node.run_id)
    return verification


@transaction.atomic
def verification_reject(*, verification: Verification, user, reason: str = "") -> Verification:
    _lock_run(_run_id_of(verification.pk))
    verification = Verification.objects.select_for_update().select_related("node__run__problem__workspace").defer("node__run__driver_state").get(pk=verification.pk)
    access_require(user=user, workspace=verification.node.run.workspace, action="approve")
    _transition(verification, "reject")
    verification.approver = user
    verification.reason = reason[:2000]
    verification.decided_at = timezone.now()
    verification.save()
    _node_set(verification.node, NodeState.REJECTED, reason or f"GPU verification rejected by {user.get_username()}.")
    _verification_changed(verification)
    # After the end no search hears of it: an ended run gives the reservation of the search's request back now.
    run_gpu_recount(run=SearchRun.objects.defer("driver_state").get(pk=verification.node.run_id))
    _wake_run(verification.node.run_id)
    return verification


def verification_approve_many(*, verifications, user) -> tuple[int, list[str]]:
    done, errors = 0, []
    for verification in verifications:
        try:
            verification_approve(verification=verification, user=user)
            done += 1
        except ServiceError as exc:
            errors.append(str(exc))
    return done, errors


def verification_reject_many(*, verifications, user, reason: str = "") -> tuple[int, list[str]]:
    done, errors = 0, []
    for verification in verifications:
        try:
            verification_reject(verification=verification, user=user, reason=reason)
            done += 1
        except ServiceError as exc:
            errors.append(str(exc))
    return done, errors


def _claim_holder_stopped(row: Verification, now) -> bool:
    """Whether the worker named in a running row's claim is gone (selectors.workers.claim_holder_stopped): killed
    and started again under its name, or silent for three heartbeats."""
    from kernellab.selectors.workers import claim_holder_stopped, worker_incarnations

    return claim_holder_stopped(hostname=row.claimed_by, claimed_at=row.started_at, heard_at=row.heartbeat_at,
                                incarnations=worker_incarnations(hostnames=[row.claimed_by]), now=now)


def verification_claim(*, verification_id: int, token: str, worker: str = "") -> Verification | None:
    """Take the row for one attempt, for the Celery worker named `worker` (its hostname). Returns None when there
    is nothing to do (done, rejected, claimed by a live worker, or out of attempts)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.KERNELLAB_STALE_RUNNING_S)
    with transaction.atomic():
        _lock_run(_run_id_of(verification_id))
        row = Verification.objects.select_for_update().filter(pk=verification_id).first()
        if row is None:
            return None
        claimable = row.state == VerificationState.QUEUED or (
            # The same message redelivered means its earlier execution died; a stale heartbeat
            # means a worker vanished without the broker noticing; a claim whose worker stopped
            # beating, or started again since, is held by nobody. A claim still held by a live
            # worker is never taken: it finishes (or fails) the row itself.
            row.state == VerificationState.RUNNING
            and (row.claim_token == token or (row.heartbeat_at is not None and row.heartbeat_at < stale)
                 or _claim_holder_stopped(row, now))
        )
        if not claimable:
            return None
        if row.attempts >= row.max_attempts:
            _fail_locked(row, f"Gave up after {row.attempts} attempts; the worker stopped each time.")
            return None
        updated = Verification.objects.filter(pk=row.pk, state=row.state, attempts=row.attempts).update(
            state=VerificationState.RUNNING,
            attempts=row.attempts + 1,
            claim_token=token,
            claimed_by=(worker or "")[:200],
            started_at=now,
            heartbeat_at=now,
            progress="starting",
        )
        if updated != 1:
            return None  # another process got there first
        row.refresh_from_db()
        _node_set(row.node, NodeState.MEASURING)
        _verification_changed(row)
        return row


def verification_heartbeat(*, verification: Verification, progress: str) -> None:
    Verification.objects.filter(
        pk=verification.pk, state=VerificationState.RUNNING, claim_token=verification.claim_token, attempts=verification.attempts
    ).update(heartbeat_at=timezone.now(), progress=progress[:120])
    with transaction.atomic():
        verification.progress = progress[:120]
        _verification_changed(verification)


NODE_STATE_FOR_STATUS = {
    "ok": NodeState.MEASURED,
    "failed-compile": NodeState.FAILED_COMPILE,
    "failed-correctness": NodeState.FAILED_CORRECTNESS,
    "failed-runtime": NodeState.FAILED_RUNTIME,
    "failed-timeout": NodeState.FAILED_RUNTIME,
    "rejected-guard": NodeState.REJECTED,
    "unavailable": NodeState.NOT_RECORDED,
}


def _node_measured(node: Node, measurement: Measurement) -> None:
    if node.parent_id is None:
        _reference_measured(node, measurement)
        return
    node.speedup = measurement.speedup if measurement.status == "ok" else None
    if measurement.status == "ok":
        node.value = measurement.speedup
    node.save(update_fields=["speedup", "value", "updated_at"])
    _node_set(node, NODE_STATE_FOR_STATUS.get(measurement.status, NodeState.FAILED_RUNTIME), measurement.reason)


def _reference_measured(node: Node, measurement: Measurement) -> None:
    """The root is the reference kernel, and every speedup is the reference's time over a kernel's: the reference's
    own is 1.0 by definition. Measured again, it is timed against itself, and its ratio (0.9998, say) is the noise of
    the measurement on this GPU. The measurement is kept and shown as that; the node stays measured at exactly 1.0,
    whatever the ratio or the status (a failed re-measurement is a fault of the GPU, not of the reference)."""
    if measurement.status == "ok" and measurement.speedup:
        noise = abs(measurement.speedup - 1.0) * 100
        reason = (f"The reference, measured against itself at {measurement.speedup:.4f}x: {noise:.2f}% of timing noise "
                  "on this GPU. Its speedup stays 1.0 by definition.")
    else:
        reason = (f"A measurement of the reference against itself ended {measurement.status}"
                  f"{': ' + measurement.reason if measurement.reason else ''}. Its speedup stays 1.0 by definition.")
    node.speedup = node.value = 1.0
    node.save(update_fields=["speedup", "value", "updated_at"])
    _node_set(node, NodeState.MEASURED, reason[:2000])


def run_ended_at(run: SearchRun):
    """When the run reached its end (finished, cancelled or failed), or None while a search may still advance it."""
    if run.status not in RUN_ENDED_STATES:
        return None
    ended = RunChange.objects.filter(run=run, kind="run").order_by("-seq").values_list("created_at", flat=True).first()
    return ended or run.updated_at


# Requests not measured yet: they hold part of the budget (a reservation), they have not used the GPU.
AWAITING_APPROVAL_STATES = (VerificationState.PENDING,)
ON_THE_WAY_STATES = (VerificationState.APPROVED, VerificationState.QUEUED, VerificationState.RUNNING)


def run_verification_counts(*, run: SearchRun) -> dict:
    """How the run's GPU measurement requests stand, from the verification rows (the one place every page reads it):
    `measured` took the GPU (done or failed; a kernel's measurement reused for a twin node is done too), `pending`
    awaits an approver, `queued` is approved, queued or on a GPU now, `cancelled` was cancelled with the run before
    it was measured, `rejected` an approver refused."""
    counts = dict(Verification.objects.filter(node__run=run).order_by().values_list("state").annotate(n=Count("pk")))
    return {
        "measured": sum(counts.get(state, 0) for state in GPU_TAKEN_STATES),
        "pending": sum(counts.get(state, 0) for state in AWAITING_APPROVAL_STATES),
        "queued": sum(counts.get(state, 0) for state in ON_THE_WAY_STATES),
        "cancelled": counts.get(VerificationState.CANCELLED, 0),
        "rejected": counts.get(VerificationState.REJECTED, 0),
    }


def _released_after_the_end(run: SearchRun) -> int:
    """The search's reservations that an ended run gives back: requests the search made (`requested_by_policy`; the
    search counted each when it made it) that were never measured and that the search never heard the end of:
    cancelled with the run, or rejected by an approver while the search's saved state still has the node awaiting
    approval (rejected after the end, or while the run was paused, or before the search stepped again). A rejection
    the search was told of (the node no longer awaits approval in its state) it gave back itself."""
    from search_engine.node_states import NodeState as SearchNodeState
    from search_engine.saved_state import SavedSearch

    asked_by_search = Verification.objects.filter(node__run=run).exclude(requested_by_policy="")
    cancelled = asked_by_search.filter(state=VerificationState.CANCELLED).count()
    rejected = list(asked_by_search.filter(state=VerificationState.REJECTED).values_list("node__key", flat=True))
    if not rejected:  # (the saved state, the whole tree, is read only where a rejection asks for it)
        return cancelled
    state = SearchRun.objects.filter(pk=run.pk).values_list("driver_state", flat=True).first()
    awaiting = {str(node_id) for node_id, node_state in SavedSearch(state).node_states().items()
                if node_state == SearchNodeState.AWAITING_APPROVAL}
    return cancelled + sum(1 for key in rejected if key in awaiting)


# The search's record, in SearchRun.driver_state beside the driver's own keys (services.search keeps it; the driver
# never reads it), of the verifications people asked for that it counted in its `measurements_requested`: a
# measurement of a node it had not measured (SearchDriver.measure_outside) or a re-measurement of one it had. A
# person's measurement that took the GPU and is not in it was never counted by the search.
HAND_COUNTED_KEY = "counted_by_hand"
SEARCHING_STATES = (RunStatus.RUNNING, RunStatus.WAITING, RunStatus.PAUSED)


def hand_requested(verifications):
    """The verifications a person asked for (a request of the search's says why: `requested_by_policy`)."""
    return verifications.filter(requested_by_policy="")


def _gpu_count(run: SearchRun) -> dict:
    """What gpu_used is by the rules of run_gpu_use, from the rows (read only): `used`, `by_hand`, `released`."""
    if run.status in SEARCHING_STATES:
        return {"used": run.gpu_used, "by_hand": 0, "released": 0}
    counted, record = (SearchRun.objects.filter(pk=run.pk).values_list(
        "driver_state__counters__measurements_requested", f"driver_state__{HAND_COUNTED_KEY}").first() or (None, None))
    taken = Verification.objects.filter(node__run=run, state__in=GPU_TAKEN_STATES)
    if not isinstance(counted, int):  # the search never saved a step: it counted nothing
        return {"used": taken.count(), "by_hand": 0, "released": 0}
    ended = run_ended_at(run)
    released = min(counted, _released_after_the_end(run))
    if isinstance(record, list):
        outside = hand_requested(taken).exclude(pk__in=record)
    else:  # a run whose search saved no record (before it kept one): what people asked for after the end
        outside = taken.filter(created_at__gt=ended) if ended is not None else taken.none()
    by_hand = outside.count()
    return {"used": counted - released + by_hand, "by_hand": by_hand, "released": released}


def run_gpu_recount(*, run: SearchRun) -> int:
    """Store an ended run's gpu_used by the rules of run_gpu_use (where it differs) and return it; a run a search
    still advances is left to the search. Called where the count of an ended run can change: when the run ends
    (services.runs.run_transition, and services.search after an advance that saved the search's state of a run
    that has ended), when a measurement ends, when an approver rejects a request, when a person adds a candidate
    to a finished run. Idempotent."""
    if run.status in SEARCHING_STATES:
        return run.gpu_used
    used = _gpu_count(run)["used"]
    if SearchRun.objects.filter(pk=run.pk).exclude(gpu_used=used).update(gpu_used=used):
        change_record(run=run, kind="gpu", payload={"used": used})  # the explorer's counter moves now
    run.gpu_used = used
    return used


def run_gpu_use(*, run: SearchRun) -> dict:
    """The run's GPU budget use and how it splits, as every page shows them; `used` is SearchRun.gpu_used. It only
    reads: a page never writes the count (run_gpu_recount keeps it, where the count changes).

    `used` is the budget's use, not a count of measurements: a request reserves budget when it is made. While a
    search advances the run, the search keeps gpu_used: every measurement it asked for, requests awaiting approval
    or a GPU included, and those people asked for once they took the GPU (done or failed), of a node it had not
    measured (SearchDriver.measure_outside) or again of one it had (services.search._feed_outside_events), each
    once (it records which: HAND_COUNTED_KEY). An ended run (finished, cancelled, failed) is never advanced again,
    so there gpu_used becomes the search's own count (its saved counters) less the reservations it can no longer
    give back itself (its requests cancelled with the run, or rejected after the end: `released`), plus the
    measurements people asked for that took the GPU and that the search never counted (asked for after the end, or
    before it and not yet fed to the search when it ended; a run whose search kept no record of them, from before
    it did: those asked for after the end). A run whose search never saved a step (created, or ended before its
    first) counted nothing: every measurement of it that took the GPU is counted this way. run_gpu_recount stores
    it when the run ends and whenever it changes after the end (a migration recounted the runs ended before).

    The split comes from the rows (run_verification_counts): `measured`, `pending` (awaiting approval), `queued`
    (approved, queued or measuring), `reserved` (the two: budget held, no measurement yet), `cancelled`, `rejected`.
    `by_hand` is the part of `used` that people asked for and the search never counted, `by_search` the rest,
    `over` how far `used` went past the budget (a search stops at its budget; a person's request is measured
    whatever the budget says)."""
    searching = run.status in SEARCHING_STATES
    used = run.gpu_used
    count = _gpu_count(run) if not searching else {"by_hand": 0, "released": 0}
    by_hand = min(count["by_hand"], used)
    rows = run_verification_counts(run=run)
    return {"used": used, "budget": run.gpu_budget, "by_search": used - by_hand, "by_hand": by_hand,
            "over": max(0, used - run.gpu_budget), "released": count["released"], "searching": searching,
            **rows, "reserved": rows["pending"] + rows["queued"]}


def _count_if_outside_search(verification: Verification) -> None:
    """A measurement has taken the GPU: where no search will count it (an ended run), count it now."""
    run = SearchRun.objects.defer("driver_state").get(pk=verification.node.run_id)
    run_gpu_recount(run=run)


@transaction.atomic
def verification_finish(*, verification: Verification, result: dict, expert_notes: list[dict] | None = None) -> Measurement | None:
    """Store the runner's result exactly once. Returns None when this attempt lost its claim."""
    _lock_run(_run_id_of(verification.pk))
    updated = Verification.objects.filter(
        pk=verification.pk, state=VerificationState.RUNNING, claim_token=verification.claim_token, attempts=verification.attempts
    ).update(state=VerificationState.DONE, finished_at=timezone.now(), progress="done")
    if updated != 1:
        return None
    verification.refresh_from_db()
    _count_if_outside_search(verification)
    node = verification.node
    measurement = measurement_store(node=node, result=result, expert_notes=expert_notes)
    reference_measurement_keep(problem_id=node.run.problem_id, gpu=node.run.target_gpu, run_id=node.run_id,
                               result=result)
    Verification.objects.filter(pk=verification.pk).update(measurement=measurement)
    verification.measurement = measurement
    _node_measured(node, measurement)
    _verification_changed(verification)
    _wake_run(node.run_id)
    return measurement


def measurement_store(*, node: Node, result: dict, expert_notes: list[dict] | None = None) -> Measurement:
    from kernellab.models import ExpertNote

    run = node.run
    hardware = result.get("hardware") or {}
    energy = result.get("energy")
    measurement = Measurement.objects.create(
        kernel=node.kernel,
        problem=run.problem,
        status=result.get("status", "failed-runtime"),
        reason=(result.get("reason") or "")[:4000],
        hardware=hardware,
        gpu_model=result.get("gpu_model") or run.target_gpu,
        reference_stats=result.get("reference") or {},
        candidate_stats=result.get("candidate") or {},
        speedup=result.get("speedup"),
        max_abs_error=result.get("max_abs_error"),
        max_rel_error=result.get("max_rel_error"),
        energy=energy if isinstance(energy, dict) else None,
        compiler_facts=result.get("compiler") or {},
        profiler_metrics=result.get("profiler") or {},
        observer_errors=result.get("observer_errors") or {},
        backend=result.get("backend", "unknown"),
        seed=result.get("seed") or 0,
    )
    for note in expert_notes or []:
        ExpertNote.objects.create(
            measurement=measurement,
            expert=note["expert"],
            severity=note["severity"],
            finding=note["finding"],
            evidence=note.get("evidence") or {},
            advice=note.get("advice", ""),
        )
    return measurement


def _fail_locked(row: Verification, reason: str) -> None:
    Verification.objects.filter(pk=row.pk).update(state=VerificationState.FAILED, reason=reason, finished_at=timezone.now())
    row.refresh_from_db()
    _count_if_outside_search(row)
    _node_set(row.node, NodeState.FAILED_RUNTIME, reason)
    _verification_changed(row)
    _wake_run(row.node.run_id)


@transaction.atomic
def verification_fail(*, verification: Verification, reason: str) -> bool:
    """The infrastructure failed (not the candidate). True when this attempt still held the row."""
    _lock_run(_run_id_of(verification.pk))
    row = Verification.objects.select_for_update().filter(
        pk=verification.pk, state=VerificationState.RUNNING, claim_token=verification.claim_token, attempts=verification.attempts
    ).first()
    if row is None:
        return False
    _fail_locked(row, reason[:2000])
    return True


@transaction.atomic
def verifications_cancel_for_run(*, run) -> int:
    """A cancelled run leaves nothing to measure: every verification still waiting for an approver
    or a worker is cancelled (a worker that takes its message finds nothing to claim). One already
    on a GPU finishes and is kept. Returns how many were cancelled."""
    _lock_run(run.pk)
    rows = list(
        Verification.objects.select_for_update(of=("self",)).select_related("node__run").defer("node__run__driver_state")
        .filter(node__run=run, state__in=VERIFICATION_TRANSITIONS["cancel"][0]).order_by("pk")
    )
    now = timezone.now()
    for row in rows:
        _transition(row, "cancel")
        row.reason = "The run was cancelled before this was measured."
        row.finished_at = now
        row.save(update_fields=["state", "reason", "finished_at"])
        _node_set(row.node, NodeState.CANCELLED, row.reason)
        _verification_changed(row)
    return len(rows)


def verification_requeue_stale() -> int:
    """Hand rows whose worker vanished back to the queue. Returns how many were re-sent.

    queued_at records when a row's message was last sent, and re-sending moves it on: each row is
    re-sent at most once per stale period, where a queue that no worker consumes would otherwise
    get one more duplicate message per row on every run of this task."""
    from kernellab.tasks import verification_execute

    now = timezone.now()
    stale = now - timedelta(seconds=settings.KERNELLAB_STALE_RUNNING_S)
    not_sent_lately = Q(queued_at__isnull=True) | Q(queued_at__lt=stale)
    due = (Q(state=VerificationState.RUNNING, heartbeat_at__lt=stale) & not_sent_lately) | Q(
        state=VerificationState.QUEUED, queued_at__lt=stale
    )
    rows = list(Verification.objects.filter(due).values_list("pk", "queue"))
    sent = 0
    for pk, queue in rows:
        # Conditional: of two overlapping runs of this task only one re-sends a row.
        if Verification.objects.filter(due, pk=pk).update(queued_at=now) != 1:
            continue
        verification_execute.apply_async(args=[pk], queue=queue)
        sent += 1
    return sent + verifications_requeue_of_stopped_workers(now=now)


def verifications_requeue_of_stopped_workers(*, hostname: str | None = None, now=None) -> int:
    """Re-send the running rows whose claiming worker is gone (selectors.workers.claim_holder_stopped: it was killed
    and started again under its name, or it has not beaten for three heartbeats), well before
    KERNELLAB_STALE_RUNNING_S; with `hostname`, only that worker's (a worker starting again re-sends what its
    earlier process held). Each claim is re-sent once (queued_at moves past its started_at). The row stays as it
    is until the new message claims it (verification_claim takes a claim whose worker is gone): a worker that was
    only slow and finishes first leaves the new message nothing to do, so nothing is measured twice."""
    from kernellab.selectors.workers import claim_holder_stopped, worker_incarnations
    from kernellab.tasks import verification_execute

    now = now or timezone.now()
    not_sent_since_claim = Q(queued_at__isnull=True) | Q(queued_at__lt=F("started_at"))
    held = Verification.objects.filter(not_sent_since_claim, state=VerificationState.RUNNING).exclude(claimed_by="")
    if hostname is not None:
        held = held.filter(claimed_by=hostname)
    rows = list(held.values_list("pk", "queue", "claimed_by", "claim_token", "attempts", "started_at", "heartbeat_at"))
    incarnations = worker_incarnations(hostnames={row[2] for row in rows})
    sent = 0
    for pk, queue, worker, token, attempts, started_at, heard_at in rows:
        if not claim_holder_stopped(hostname=worker, claimed_at=started_at, heard_at=heard_at,
                                    incarnations=incarnations, now=now):
            continue
        # Conditional on the same claim, not yet re-sent: of two overlapping callers only one sends it.
        same_claim = Verification.objects.filter(not_sent_since_claim, pk=pk, state=VerificationState.RUNNING,
                                                 claim_token=token, attempts=attempts)
        if same_claim.update(queued_at=now) != 1:
            continue
        log.warning("verification %s was claimed by worker %s, which stopped; sent again on %s", pk, worker, queue)
        _publish(verification_execute, pk, queue)
        sent += 1
    return sent


def _wake_run(run_id: int) -> None:
    from kernellab.tasks import search_run_advance

    transaction.on_commit(lambda: _publish(search_run_advance, run_id, "search"))


def _publish(task, pk: int, queue: str) -> bool:
    """Send `task` for `pk` after the commit that asked for it. A broker that cannot be reached must not turn the
    person's request (already committed) into a 500: it is logged, and the beat sends it later (a queued
    verification is re-sent once it is stale, a running run without a lease is advanced by the sweep)."""
    from kernellab.services.runs import _broker_errors

    try:
        task.apply_async(args=[pk], queue=queue)
    except _broker_errors() as exc:
        log.warning("%s(%s) could not be queued on %s; the beat will send it later: %s", task.name, pk, queue,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return False
    return True


def new_claim_token() -> str:
    return uuid.uuid4().hex
