"""Which backends can measure a problem now, and why a waiting run waits.

Replay answers only for problems with recorded measurements on the target GPU; a GPU backend
answers only while a worker listens on the target GPU's queue."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from kernellab.models import Problem, SearchRun, Verification, VerificationState
from kernellab.selectors.problems import problem_records_file
from kernellab.selectors.workers import (claim_holder_stopped, queue_has_live_worker, queue_worker_sentence,
                                         worker_incarnations)

BACKENDS = ("auto", "replay", "cupy", "pycuda")


def backend_resolve(backend: str) -> str:
    """The backend a run stores: "auto" stays auto (the worker picks) except in the embedded setup
    without a GPU, whose one local worker can only answer from recorded data."""
    if backend == "auto" and not settings.KERNELLAB_REDIS_URL:
        from gpu_runner import gpu_present

        if not gpu_present():
            return "replay"
    return backend


@dataclass(frozen=True)
class BackendChoice:
    name: str            # what the run form offers: auto, replay, cupy, pycuda
    measures_with: str   # auto resolved: replay, or the GPU backend the worker picks
    queue: str
    unavailable: str     # why it cannot measure this problem now; empty when it can

    @property
    def available(self) -> bool:
        return not self.unavailable


def problem_has_recordings(*, problem: Problem, gpu: str) -> bool:
    return problem_records_file(problem, gpu).is_file()


def backend_choice(*, problem: Problem, backend: str, target_gpu: str) -> BackendChoice:
    gpu = target_gpu.lower()
    resolved = backend_resolve(backend)
    if resolved == "replay":
        unavailable = ""
        if not problem_has_recordings(problem=problem, gpu=gpu):
            unavailable = ("no recorded measurements for this problem" if not problem.bundled
                           else f"no recorded measurements of this problem on {gpu}")
        if backend == "auto" and unavailable:
            unavailable = f"no GPU on this machine, so it would replay, and there are {unavailable}"
        return BackendChoice(backend, "replay", "replay", unavailable)
    queue = f"gpu.{gpu}"
    unavailable = "" if queue_has_live_worker(queue=queue) else queue_worker_sentence(queue=queue)
    return BackendChoice(backend, resolved, queue, unavailable)


def run_backend_choices(*, problem: Problem, target_gpu: str) -> list[BackendChoice]:
    return [backend_choice(problem=problem, backend=name, target_gpu=target_gpu) for name in BACKENDS]


def run_wait_reason(*, run: SearchRun) -> str:
    """Why a live run is not moving, in one sentence; empty when nothing holds it up."""
    if run.status not in ("running", "waiting"):
        return ""
    states = dict.fromkeys((VerificationState.QUEUED, VerificationState.PENDING, VerificationState.RUNNING), 0)
    for state in Verification.objects.filter(node__run=run, state__in=list(states)).values_list("state", flat=True):
        states[state] += 1
    queued, pending, running = (states[VerificationState.QUEUED], states[VerificationState.PENDING],
                                states[VerificationState.RUNNING])
    parts = []
    if queued:
        plural = "s" if queued != 1 else ""
        if queue_has_live_worker(queue=run.gpu_queue):
            parts.append(f"{queued} verification{plural} queued on {run.gpu_queue}")
        else:
            parts.append(f"{queued} verification{plural} queued, but {queue_worker_sentence(queue=run.gpu_queue)}")
    if running:
        # A worker that stopped sending heartbeats is gone: say so, not "being measured" for ever.
        now = timezone.now()
        stale = now - timedelta(seconds=settings.KERNELLAB_STALE_RUNNING_S)
        heard = list(Verification.objects.filter(node__run=run, state=VerificationState.RUNNING, heartbeat_at__lt=stale)
                     .values_list("heartbeat_at", flat=True))
        # So is a claim whose worker was killed (it stopped beating, or started again under its name since): the
        # beat, or that worker starting again, sends it back to the queue long before its heartbeat is stale.
        claims = list(Verification.objects.filter(node__run=run, state=VerificationState.RUNNING)
                      .exclude(heartbeat_at__lt=stale).exclude(claimed_by="")
                      .values_list("claimed_by", "started_at", "heartbeat_at", "queued_at"))
        incarnations = worker_incarnations(hostnames={claim[0] for claim in claims})
        orphans = [(worker, bool(queued_at and claimed_at and queued_at > claimed_at))
                   for worker, claimed_at, heard_at, queued_at in claims
                   if claim_holder_stopped(hostname=worker, claimed_at=claimed_at, heard_at=heard_at,
                                           incarnations=incarnations, now=now)]
        if len(heard) + len(orphans) < running:
            parts.append(f"{running - len(heard) - len(orphans)} being measured")
        if orphans:
            names = ", ".join(sorted({worker for worker, _ in orphans}))
            requeued = all(sent for _, sent in orphans)
            if len(orphans) == 1:
                parts.append(f"1 verification's worker ({names}) stopped; "
                             + ("it was requeued and waits for a worker" if requeued else "it will be requeued"))
            else:
                parts.append(f"{len(orphans)} verifications' workers ({names}) stopped; "
                             + ("they were requeued and wait for a worker" if requeued else "they will be requeued"))
        if heard:
            minutes = max(1, int((timezone.now() - max(heard)).total_seconds() // 60))
            if len(heard) == 1:
                parts.append(f"1 verification's worker was last heard {minutes} minute{'s' if minutes != 1 else ''} ago; "
                             "it will be retried")
            else:
                parts.append(f"{len(heard)} verifications' workers were last heard {minutes} or more minutes ago; "
                             "they will be retried")
    if pending:
        parts.append(f"{pending} awaiting an approver")
    if not parts:
        return ""
    sentence = "; ".join(parts)
    return sentence[0].upper() + sentence[1:] + "."


def run_open_verification_count(*, run: SearchRun) -> int:
    """Verifications that cancelling the run would cancel: waiting for an approver or a worker."""
    from kernellab.models import VERIFICATION_TRANSITIONS

    return Verification.objects.filter(node__run=run, state__in=VERIFICATION_TRANSITIONS["cancel"][0]).count()
