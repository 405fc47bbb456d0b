"""KernelLab's settings for benchmarks/scaleout_bench.py --fs-poll-s: the filesystem broker polled
every KERNELLAB_SCALEOUT_POLL_S seconds instead of kombu's default of 1 s.

An idle worker on the filesystem broker looks for a message once per polling interval, so with the
default each worker takes at most about one job per second whatever the job costs. Redis (the
team deployment) hands a message over as soon as it arrives; a short poll comes closer to that on
a machine without Redis. Nothing else changes."""
import os

from kernellab.settings import *  # noqa: F401,F403
from kernellab.settings import CELERY_BROKER_TRANSPORT_OPTIONS, KERNELLAB_REDIS_URL

if not KERNELLAB_REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        **CELERY_BROKER_TRANSPORT_OPTIONS,
        "polling_interval": float(os.environ.get("KERNELLAB_SCALEOUT_POLL_S", "1.0")),
    }
