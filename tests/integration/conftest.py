"""Real services: a Celery worker process over Redis against the test database."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def redis_url_or_skip() -> str:
    from django.conf import settings

    if not settings.KERNELLAB_REDIS_URL:
        pytest.skip("REDIS_URL is not set: the worker tests need Redis as the Celery broker (.ci/run sets it)")
    import redis

    try:
        redis.Redis.from_url(settings.KERNELLAB_REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as exc:
        pytest.fail(f"REDIS_URL is set but Redis does not answer: {exc}")
    return settings.KERNELLAB_REDIS_URL


def test_database_url() -> str:
    from django.db import connection

    params = connection.settings_dict
    if params["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{params['NAME']}"
    user = params.get("USER") or "postgres"
    password = f":{params['PASSWORD']}" if params.get("PASSWORD") else ""
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{params['NAME']}"


class WorkerProcess:
    def __init__(self, queue: str, env: dict[str, str]):
        self.queue = queue
        self.env = env
        self.process: subprocess.Popen | None = None
        self.log = ROOT / "test-artifacts" / f"worker-{queue}.log"
        self.log.parent.mkdir(exist_ok=True)

    def start(self) -> None:
        handle = open(self.log, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kernellab", "worker", "-Q", self.queue, "--concurrency", "1",
             "--loglevel", "INFO", "-n", f"{self.queue}-{time.monotonic_ns()}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once, as a crashed machine would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def worker_factory():
    workers: list[WorkerProcess] = []

    def make(queue: str, **extra_env: str) -> WorkerProcess:
        env = dict(os.environ)
        env.update({"DATABASE_URL": test_database_url(), "REDIS_URL": redis_url_or_skip(), **extra_env})
        env.pop("KERNELLAB_TASKS_EAGER", None)
        worker = WorkerProcess(queue, env)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
