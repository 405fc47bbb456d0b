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

    verification = verification_claim(verification_id=verification_id, token=self.request.id or "eager")
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
    verification_finish(verification=verification, result=result, expert_notes=notes)
    return "done"


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
