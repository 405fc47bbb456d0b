"""The Celery app. Queues: `search` (the search driver), `gpu.<model>` (one per GPU model) and
`replay` (measurements answered from recorded data, any CPU worker)."""
import logging
import os
import sys

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")

app = Celery("kernellab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_create_missing_queues = True
app.conf.beat_schedule = {
    "requeue-stale-verifications": {"task": "kernellab.tasks.verifications_requeue_stale", "schedule": 60.0},
    "advance-stuck-runs": {"task": "kernellab.tasks.search_runs_advance_stuck", "schedule": 60.0},
}
app.autodiscover_tasks(["kernellab"])


def _consumed_queues(app_) -> list[str]:
    return sorted(app_.amqp.queues.consume_from or app_.amqp.queues)


log = logging.getLogger(__name__)

# The backends that measure on a GPU: a gpu.* worker set to one of them measures (or fails saying why), never replays.
MEASURING_BACKENDS = ("cupy", "pycuda", "torch")


def _no_gpu_reason() -> str:
    """Why gpu_runner.gpu_present() finds no GPU here, as a clause."""
    import glob
    import importlib.util

    forced = os.environ.get("KERNELLAB_GPU")
    if forced is not None:
        return f"KERNELLAB_GPU={forced}"
    if not glob.glob("/dev/nvidia[0-9]*"):
        return "no /dev/nvidia* device"
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    return "gpu_runner finds none"


def gpu_worker_refusal(queues: list[str]) -> str | None:
    """Why a worker consuming these queues must not start, as one sentence; None when it may. A worker on a gpu.*
    queue without a usable GPU would answer a run set to "auto" from recorded data (KERNELLAB_RUNNER_BACKEND=auto
    falls back to replay), and its heartbeat would tell every page that a GPU measures: it refuses, unless
    KERNELLAB_RUNNER_BACKEND names a GPU backend (a GPU that gpu_runner cannot see, whose measurements then say
    why they failed). Recorded data is the replay queue's, which any CPU worker serves."""
    from django.conf import settings

    from gpu_runner import gpu_present

    gpu_queues = [queue for queue in queues if queue.startswith("gpu.")]
    if not gpu_queues or gpu_present():
        return None
    backend = settings.KERNELLAB_RUNNER_BACKEND
    if backend in MEASURING_BACKENDS:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f"{_no_gpu_reason()}{f', CUDA_VISIBLE_DEVICES={visible}' if visible is not None else ''}"
    return (f"this worker consumes {', '.join(gpu_queues)} but no GPU is usable here ({where}), so with "
            f"KERNELLAB_RUNNER_BACKEND={backend} it would answer from recorded data instead of measuring: start it "
            f"where the GPU is, serve recorded data with -Q replay, or set KERNELLAB_RUNNER_BACKEND=cupy if the GPU "
            f"is there and not found.")


@worker_init.connect
def _gpu_worker_check(sender=None, **kwargs) -> None:
    """Before the worker connects to anything: a gpu.* worker without a GPU stops with one sentence."""
    refusal = gpu_worker_refusal(_consumed_queues(sender.app))
    if refusal:
        sys.stderr.write(f"KernelLab cannot start: {refusal}\n")
        sys.stderr.flush()
        raise SystemExit(2)


@worker_ready.connect
def _heartbeats_start(sender=None, **kwargs) -> None:
    from kernellab.services.workers import (worker_heartbeat_forget, worker_heartbeat_record,
                                            worker_heartbeats_start)

    hostname, queues = sender.hostname, _consumed_queues(sender.app)
    try:
        # A fresh row, written before this worker takes its first message: what the row of an earlier process of
        # this name (killed, so it never removed it) says no longer holds, and started_at tells the claims of that
        # process (dead) from this one's (selectors.workers.claim_holder_stopped).
        worker_heartbeat_forget(hostname=hostname)
        worker_heartbeat_record(hostname=hostname, queues=queues)
    except Exception as exc:  # a database hiccup must not stop the worker; the heartbeat thread retries
        log.warning("worker %s could not record its first heartbeat: %s", hostname, exc)
    worker_heartbeats_start(hostname=hostname, queues=queues)
    _requeue_what_an_earlier_process_held(hostname)


def _requeue_what_an_earlier_process_held(hostname: str) -> None:
    """A worker killed mid-measurement (SIGKILL, the out-of-memory killer) and started again under its name sends
    the verifications its earlier process held back to their queues now, instead of leaving them "running" until
    KERNELLAB_STALE_RUNNING_S; the unacknowledged message of the dead process is redelivered only after the
    broker's visibility timeout."""
    from django.db import connection

    from kernellab.services.verifications import verifications_requeue_of_stopped_workers

    try:
        sent = verifications_requeue_of_stopped_workers(hostname=hostname)
    except Exception as exc:  # the beat's stale requeue sends them later
        log.warning("worker %s could not requeue what it held before it stopped: %s", hostname, exc)
        return
    finally:
        if not connection.in_atomic_block:
            connection.close()  # the worker's main thread is done with the database; the heartbeat thread has its own
    if sent:
        log.warning("worker %s sent %d verification(s) its earlier process held back to their queues", hostname, sent)


@worker_shutdown.connect
def _heartbeats_stop(sender=None, **kwargs) -> None:
    from kernellab.services.workers import worker_heartbeats_stop

    worker_heartbeats_stop(hostname=sender.hostname)
