"""Thin Celery tasks: load the row, call the service, retry. The database row is the truth."""
from __future__ import annotations

import logging
import os
import time

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, max_retries=3)
def verification_execute(self, verification_id: int) -> str:
    from kernellab.services.measurement import measure_for_verification
    from kernellab.services.verifications import verification_claim, verification_fail, verification_finish

    # The worker's name goes with the claim, so that a claim whose worker was killed is taken over at once; an eager
    # run (./kl search, tests) has no worker heartbeat to judge it by, and keeps to the stale-heartbeat rule.
    worker = "" if self.request.is_eager else (self.request.hostname or "")
    verification = verification_claim(verification_id=verification_id, token=self.request.id or "eager", worker=worker)
    if verification is None:
        return "nothing to do"
    delay = float(os.environ.get("KERNELLAB_TEST_VERIFY_DELAY_S", "0") or 0)
    if delay:  # fault-injection hook for the worker-kill test; never set in production
        time.sleep(delay)
    try:
        result, notes = measure_for_verification(verification)
    except SoftTimeLimitExceeded:
        verification_fail(verification=verification, reason="The measurement ran past the worker's time limit.")
        return "timed out"
    except Exception as exc:
        log.exception("verification %s failed", verification_id)
        verification_fail(verification=verification, reason=f"The GPU worker failed: {exc}")
        return "failed"
    _finish_retrying(verification_finish, verification=verification, result=result, expert_notes=notes)
    return "done"


# Pauses before trying to store a finished measurement again after a database error (a blip, a
# deadlock victim): the measurement is already paid for, and giving up would leave the row
# "running" until the stale requeue measures it all over again.
FINISH_RETRY_DELAYS_S = (2.0, 5.0)


def _finish_retrying(finish, **kwargs):
    from django.db import OperationalError, connection

    for delay in (*FINISH_RETRY_DELAYS_S, None):
        try:
            return finish(**kwargs)
        except OperationalError:
            if delay is None:
                raise
            log.warning("storing verification %s failed; trying again in %ss", kwargs["verification"].pk, delay, exc_info=True)
            # finish runs in its own transaction, rolled back by now; a broken connection is reopened.
            if not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
            time.sleep(delay)
    return None


@shared_task(bind=True, acks_late=True, max_retries=3)
def search_run_advance(self, run_id: int) -> str:
    from kernellab.services.search import run_advance, run_pause_for_time_limit

    try:
        return run_advance(run_id=run_id)
    except SoftTimeLimitExceeded as exc:  # past the step itself (taking the lease, enqueuing): still never left running
        run_pause_for_time_limit(run_id=run_id, exc=exc)
        return "timed out"


@shared_task
def verifications_requeue_stale() -> int:
    from kernellab.services.verifications import verification_requeue_stale

    return verification_requeue_stale()


# A RUNNING run with no lease and no change for this long has nobody advancing it.
STUCK_RUN_IDLE_S = 5 * 60


@shared_task
def search_runs_advance_stuck() -> int:
    """Wake runs that nothing advances: a worker died mid-advance holding the lease (now expired),
    or a lost message or a database blip left a running run with no lease and no follow-up. Each run
    is sent at most once per idle period; a duplicate advance is harmless (run_advance takes the lease)."""
    from datetime import timedelta

    from django.db.models import Q
    from django.utils import timezone

    from kernellab.models import RunChange, RunStatus, SearchRun

    now = timezone.now()
    idle = now - timedelta(seconds=STUCK_RUN_IDLE_S)
    live = SearchRun.objects.filter(status__in=(RunStatus.RUNNING, RunStatus.WAITING))
    sent = 0
    # An expired lease: its holder is gone. Clearing it (only if it is still the same expired lease)
    # lets the advance take it and keeps this task from sending again next minute.
    for run_id, lease_until in live.filter(lease_until__lt=now).values_list("pk", "lease_until"):
        if SearchRun.objects.filter(pk=run_id, lease_until=lease_until).update(lease_until=None, updated_at=now) == 1:
            search_run_advance.apply_async(args=[run_id], queue="search")
            sent += 1
    recent = RunChange.objects.filter(created_at__gte=idle).values("run_id")
    idle_runs = (live.filter(status=RunStatus.RUNNING, lease_until__isnull=True, updated_at__lt=idle)
                 .exclude(pk__in=recent).values_list("pk", flat=True))
    for run_id in idle_runs:
        stuck = Q(pk=run_id, status=RunStatus.RUNNING, lease_until__isnull=True, updated_at__lt=idle)
        if SearchRun.objects.filter(stuck).update(updated_at=now) == 1:
            search_run_advance.apply_async(args=[run_id], queue="search")
            sent += 1
    return sent
