"""The Celery app. Queues: `search` (the search driver), `gpu.<model>` (one per GPU model) and
`replay` (measurements answered from recorded data, any CPU worker)."""
import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

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


@worker_ready.connect
def _heartbeats_start(sender=None, **kwargs) -> None:
    from kernellab.services.workers import worker_heartbeats_start

    worker_heartbeats_start(hostname=sender.hostname, queues=_consumed_queues(sender.app))


@worker_shutdown.connect
def _heartbeats_stop(sender=None, **kwargs) -> None:
    from kernellab.services.workers import worker_heartbeats_stop

    worker_heartbeats_stop(hostname=sender.hostname)
