"""QA3 deploy finding 4, end to end: a GPU worker whose main process is SIGKILLed mid-measurement and started
again under its name at once finishes the verification within seconds, not after KERNELLAB_STALE_RUNNING_S
(15 minutes) as before, and the result is stored exactly once. The broker's visibility timeout is the default
hour, so the dead process's message is not redelivered within the test: only the restarted worker's requeue can
finish it."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from kernellab.models import Measurement, Verification, VerificationState
from kernellab.services.verifications import verification_request
from tests.integration.conftest import ROOT, WorkerProcess, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class NamedWorker(WorkerProcess):
    """A worker with a fixed name (`-n`), as the README's GPU worker loop gives each GPU's worker."""

    def __init__(self, queue, env, name):
        super().__init__(queue, env)
        self.name = name

    def start(self) -> None:
        handle = open(self.log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kernellab", "worker", "-Q", self.queue, "--concurrency", "1",
             "--loglevel", "INFO", "-n", self.name, "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )


@pytest.fixture
def static_node(node):
    run = node.run
    run.backend = "static"  # compiles with nvcc and reports "unavailable": enough to store a measurement
    run.target_gpu = "t" + uuid.uuid4().hex[:8]  # a queue of its own, so no other worker takes the job
    run.save()
    return node


def state_of(verification):
    return Verification.objects.values_list("state", "attempts", "claimed_by").get(pk=verification.pk)


def test_a_gpu_worker_killed_and_restarted_under_its_name_finishes_its_verification_at_once(static_node,
                                                                                            worker_factory):
    queue = static_node.run.gpu_queue
    # KERNELLAB_GPU=1: a gpu.* worker without a GPU refuses to start (finding 5); the static backend needs none.
    template = worker_factory(queue, KERNELLAB_GPU="1", KERNELLAB_STALE_RUNNING_S="900")
    name = f"gpu0-{uuid.uuid4().hex[:6]}@%h"
    first = NamedWorker(queue, {**template.env, "KERNELLAB_TEST_VERIFY_DELAY_S": "30"}, name)
    second = NamedWorker(queue, template.env, name)
    first.start()
    try:
        verification = verification_request(node=static_node, policy_reason="integration test")
        wait_for(lambda: state_of(verification)[:2] == (VerificationState.RUNNING, 1), 120,
                 "the first worker to claim the verification")
        hostname = state_of(verification)[2]
        assert hostname.startswith("gpu0-") and "%h" not in hostname
        os.kill(first.process.pid, signal.SIGKILL)  # the main process only, as the out-of-memory killer would
        first.process.wait(timeout=10)
        restarted = time.monotonic()
        second.start()
        wait_for(lambda: state_of(verification)[0] == VerificationState.DONE, 90,
                 "the restarted worker to finish the verification")
        assert time.monotonic() - restarted < 90  # was: KERNELLAB_STALE_RUNNING_S, 900 s
        # Whatever the killed process's pool child does with its 30 s delay, the result is stored once.
        time.sleep(max(0.0, 32 - (time.monotonic() - restarted)))
        assert Measurement.objects.filter(kernel=static_node.kernel).count() == 1
        assert Verification.objects.get(pk=verification.pk).measurement is not None
    finally:
        second.stop()
        try:
            os.killpg(first.process.pid, signal.SIGKILL)  # the killed process's orphaned pool child, if any
        except ProcessLookupError:
            pass
