"""Worker heartbeats: each Celery worker records, every few seconds, which queues it consumes.

A thread of the worker's main process writes the row, so the heartbeat works with any broker
(the embedded filesystem one as well as Redis) and says nothing about the tasks in flight."""
from __future__ import annotations

import logging
import threading

from django.db import close_old_connections
from django.utils import timezone

from kernellab.models import HEARTBEAT_S, WorkerHeartbeat

log = logging.getLogger(__name__)

_beating: dict[str, threading.Event] = {}


def worker_heartbeat_record(*, hostname: str, queues: list[str]) -> WorkerHeartbeat:
    now = timezone.now()
    heartbeat, _ = WorkerHeartbeat.objects.update_or_create(
        hostname=hostname[:200],
        defaults={"queues": sorted(set(queues)), "last_seen": now},
        create_defaults={"queues": sorted(set(queues)), "last_seen": now, "started_at": now},
    )
    return heartbeat


def worker_heartbeat_forget(*, hostname: str) -> None:
    """A worker that shuts down cleanly leaves at once instead of fading out."""
    WorkerHeartbeat.objects.filter(hostname=hostname[:200]).delete()


def worker_heartbeats_start(*, hostname: str, queues: list[str], interval_s: float = HEARTBEAT_S) -> threading.Thread:
    stop = threading.Event()
    _beating[hostname] = stop

    def beat() -> None:
        while not stop.is_set():
            close_old_connections()
            try:
                worker_heartbeat_record(hostname=hostname, queues=queues)
            except Exception as exc:  # a database hiccup must not stop the worker; the next beat retries
                log.warning("worker %s could not record its heartbeat: %s", hostname, exc)
            stop.wait(interval_s)
        close_old_connections()

    thread = threading.Thread(target=beat, name=f"heartbeat-{hostname}", daemon=True)
    thread.start()
    return thread


def worker_heartbeats_stop(*, hostname: str) -> None:
    stop = _beating.pop(hostname, None)
    if stop is not None:
        stop.set()
    try:
        worker_heartbeat_forget(hostname=hostname)
    except Exception as exc:
        log.warning("worker %s could not remove its heartbeat: %s", hostname, exc)
