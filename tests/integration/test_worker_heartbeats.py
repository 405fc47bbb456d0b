"""A real Celery worker records its heartbeat with its queues, over the embedded filesystem broker
and over Redis, and removes it when it stops."""
import os
import uuid

import pytest

from kernellab.models import WorkerHeartbeat
from kernellab.selectors.workers import queue_has_live_worker
from tests.integration import conftest as harness
from tests.integration.conftest import WorkerProcess, redis_url_or_skip, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _shared_database_or_skip() -> str:
    url = harness.test_database_url()
    if url.startswith("sqlite:///") and ("memory" in url or url.endswith(":")):
        pytest.skip("the test database is in memory: a worker process cannot share it (set DATABASE_URL)")
    return url


@pytest.mark.parametrize("broker", ["filesystem", "redis"])
def test_a_worker_says_which_queues_it_serves_while_it_runs(broker, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "KERNELLAB_TASKS_EAGER"}}
    # KERNELLAB_GPU=1: a worker on a gpu.* queue without a GPU refuses to start.
    env.update({"DATABASE_URL": _shared_database_or_skip(), "KERNELLAB_DATA_DIR": str(tmp_path), "KERNELLAB_GPU": "1"})
    if broker == "redis":
        env["REDIS_URL"] = redis_url_or_skip()
    queue = "gpu.t" + uuid.uuid4().hex[:8]
    assert not queue_has_live_worker(queue=queue)
    worker = WorkerProcess(queue, env)
    worker.start()
    try:
        heartbeat = wait_for(lambda: next((h for h in WorkerHeartbeat.objects.all() if queue in h.queues), None), 90,
                             "the worker's first heartbeat")
        assert queue_has_live_worker(queue=queue)
        first = heartbeat.last_seen
        wait_for(lambda: WorkerHeartbeat.objects.filter(pk=heartbeat.pk, last_seen__gt=first).exists(), 40,
                 "the next heartbeat")
    finally:
        worker.stop()
    assert not WorkerHeartbeat.objects.filter(pk=heartbeat.pk).exists()
    assert not queue_has_live_worker(queue=queue)
