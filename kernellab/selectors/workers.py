"""Which queues have a live worker, from the workers' heartbeats."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from kernellab.models import HEARTBEAT_S, WorkerHeartbeat

# Three missed heartbeats: a worker busy with a long measurement still beats (its own thread).
LIVE_WITHIN_S = 3 * HEARTBEAT_S


def _tasks_run_in_this_process() -> bool:
    from kernellab.celery import app

    return bool(app.conf.task_always_eager)


def queue_last_seen(*, queue: str) -> datetime | None:
    """When a worker consuming this queue last said it was alive (None: never)."""
    latest = None
    for queues, seen in WorkerHeartbeat.objects.values_list("queues", "last_seen"):
        if queue in (queues or []) and (latest is None or seen > latest):
            latest = seen
    return latest


def queue_has_live_worker(*, queue: str) -> bool:
    if _tasks_run_in_this_process():
        # Eager tasks run in the caller: it serves every queue it can do the work of.
        if not queue.startswith("gpu."):
            return True
        from gpu_runner import gpu_present

        return gpu_present()
    seen = queue_last_seen(queue=queue)
    return seen is not None and seen >= timezone.now() - timedelta(seconds=LIVE_WITHIN_S)


def worker_incarnations(*, hostnames) -> dict[str, tuple[datetime, datetime]]:
    """{hostname: (started_at, last_seen)} of these workers' heartbeat rows; a worker with none is not listed (it
    never beat, or it shut down cleanly). A worker starting again under its name gets a new started_at
    (kernellab/celery.py drops the row its earlier process left)."""
    names = {name for name in hostnames if name}
    if not names:
        return {}
    return {hostname: (started, seen) for hostname, started, seen in
            WorkerHeartbeat.objects.filter(hostname__in=names).values_list("hostname", "started_at", "last_seen")}


def claim_holder_stopped(*, hostname: str, claimed_at: datetime | None, heard_at: datetime | None,
                         incarnations: dict[str, tuple[datetime, datetime]], now: datetime | None = None) -> bool:
    """Whether the worker that claimed a running verification is gone, so that nothing measures it: the worker of
    that name started again after the claim (it was killed and restarted), or it has not beaten for LIVE_WITHIN_S
    (three heartbeats) and the claim is older than that. A claim without a worker name (made before workers were
    named, or in-process) is judged by its own heartbeat age only (KERNELLAB_STALE_RUNNING_S)."""
    if not hostname:
        return False
    now = now or timezone.now()
    window = timedelta(seconds=LIVE_WITHIN_S)
    incarnation = incarnations.get(hostname)
    if incarnation is not None and claimed_at is not None and incarnation[0] > claimed_at:
        return True
    if heard_at is None or heard_at >= now - window:
        return False  # too recent to tell: a worker beats every HEARTBEAT_S
    return incarnation is None or incarnation[1] < now - window


# Backends that answer from recorded data or estimates, not from a GPU (gpu_runner's replay and static).
NOT_MEASURED_BACKENDS = ("replay", "static")


def workers_answering_from_records(*, incarnations: dict[str, tuple[datetime, datetime]]) -> set[str]:
    """The workers among `incarnations` (worker_incarnations) whose latest answer to a verification, since they
    started, came from recorded data rather than a GPU: a gpu.* worker with KERNELLAB_RUNNER_BACKEND=replay, say.
    A worker that has answered nothing yet is not among them."""
    from django.db.models import Max

    from kernellab.models import Verification

    if not incarnations:
        return set()
    latest = (Verification.objects.filter(claimed_by__in=list(incarnations), measurement__isnull=False)
              .order_by().values("claimed_by").annotate(last=Max("pk")).values("last"))
    return {hostname for hostname, backend, started in
            Verification.objects.filter(pk__in=latest).values_list("claimed_by", "measurement__backend", "started_at")
            if backend in NOT_MEASURED_BACKENDS and started is not None and started >= incarnations[hostname][0]}


def queues_with_live_worker() -> set[str]:
    since = timezone.now() - timedelta(seconds=LIVE_WITHIN_S)
    live: set[str] = set()
    for queues in WorkerHeartbeat.objects.filter(last_seen__gte=since).values_list("queues", flat=True):
        live.update(queues or [])
    return live


def queue_worker_sentence(*, queue: str) -> str:
    """'no GPU worker listening on gpu.h200 (last seen 3 minutes ago)' or '(never)'."""
    from django.utils.timesince import timesince

    seen = queue_last_seen(queue=queue)
    when = f"last seen {timesince(seen)} ago" if seen is not None else "never seen"
    kind = "GPU worker" if queue.startswith("gpu.") else "worker"
    return f"no {kind} listening on {queue} ({when})"


def gpu_queues_with_live_worker() -> set[str]:
    if _tasks_run_in_this_process():
        from gpu_runner import gpu_present

        return {"gpu.local"} if gpu_present() else set()
    # A worker on a gpu.* queue whose answers came from recorded data measures nothing: the replay label stays.
    since = timezone.now() - timedelta(seconds=LIVE_WITHIN_S)
    workers = {hostname: (queues, started, seen) for hostname, queues, started, seen in
               WorkerHeartbeat.objects.filter(last_seen__gte=since).values_list("hostname", "queues", "started_at",
                                                                                "last_seen")
               if any(queue.startswith("gpu.") for queue in queues or [])}
    replaying = workers_answering_from_records(
        incarnations={hostname: (started, seen) for hostname, (_, started, seen) in workers.items()})
    return {queue for hostname, (queues, _, _) in workers.items() if hostname not in replaying
            for queue in queues if queue.startswith("gpu.")}
