"""The Celery app. Queues: `search` (the search driver), `gpu.<model>` (one per GPU model) and
`replay` (measurements answered from recorded data, any CPU worker)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")

app = Celery("kernellab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_create_missing_queues = True
app.conf.beat_schedule = {
    "requeue-stale-verifications": {"task": "kernellab.tasks.verifications_requeue_stale", "schedule": 60.0},
}
app.autodiscover_tasks(["kernellab"])
