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
    return {queue for queue in queues_with_live_worker() if queue.startswith("gpu.")}
