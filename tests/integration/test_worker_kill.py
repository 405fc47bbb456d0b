"""A worker killed in the middle of a verification: never lost, never finished twice."""
import uuid

import pytest

from kernellab.models import Measurement, Verification, VerificationState
from kernellab.services.verifications import verification_request
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def static_node(node):
    run = node.run
    run.backend = "static"  # compiles with nvcc and reports "unavailable": enough to store a measurement
    run.target_gpu = "t" + uuid.uuid4().hex[:8]  # a queue of its own, so no other worker takes the job
    run.save()
    return node


# A gpu.* worker without a GPU refuses to start; the static backend these tests use needs none.
GPU = {"KERNELLAB_GPU": "1"}


def state_of(verification):
    return Verification.objects.values_list("state", "attempts").get(pk=verification.pk)


def test_a_verification_runs_through_a_real_worker_over_redis(static_node, worker_factory):
    worker = worker_factory(static_node.run.gpu_queue, **GPU)
    worker.start()
    verification = verification_request(node=static_node, policy_reason="integration test")
    wait_for(lambda: state_of(verification)[0] == VerificationState.DONE, 90, "the worker to finish the verification")
    measurement = Measurement.objects.get(kernel=static_node.kernel)
    assert measurement.backend == "static"
    static_node.refresh_from_db()
    assert static_node.state not in ("queued", "measuring")


def test_a_worker_killed_mid_verification_finishes_it_exactly_once_after_restart(static_node, worker_factory):
    env = {"KERNELLAB_TEST_VERIFY_DELAY_S": "8", "KERNELLAB_VISIBILITY_TIMEOUT_S": "3", **GPU}
    first = worker_factory(static_node.run.gpu_queue, **env)
    first.start()
    verification = verification_request(node=static_node, policy_reason="integration test")
    wait_for(lambda: state_of(verification) == (VerificationState.RUNNING, 1), 90, "the first worker to claim the verification")
    first.kill()
    assert state_of(verification) == (VerificationState.RUNNING, 1)
    assert Measurement.objects.filter(kernel=static_node.kernel).count() == 0

    second = worker_factory(static_node.run.gpu_queue, KERNELLAB_VISIBILITY_TIMEOUT_S="3", **GPU)
    second.start()
    wait_for(lambda: state_of(verification)[0] == VerificationState.DONE, 120, "the restarted worker to finish the verification")
    assert state_of(verification) == (VerificationState.DONE, 2)
    # Give a duplicate delivery, if any, the time to run: it must find nothing to do.
    import time

    time.sleep(5)
    assert Measurement.objects.filter(kernel=static_node.kernel).count() == 1
    assert Verification.objects.get(pk=verification.pk).measurement is not None
