"""A real KernelLab server for browser tests and benchmarks: migrate a fresh data folder, serve it
with daphne (HTTP and websockets) on a free port, and feed its database from a helper process."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Feeder:
    """Calls into tests.browser.world inside a process configured like the server."""

    def __init__(self, env: dict):
        self.process = subprocess.Popen(
            [PYTHON, "-m", "tests.browser.feeder"], cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError("the feeder process did not start")

    def __call__(self, fn: str, **kwargs):
        self.process.stdin.write(json.dumps({"fn": fn, "kwargs": kwargs}) + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"{fn} failed in the feeder: {answer['error']}\n{answer.get('trace', '')}")
        return answer["ok"]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


class KernelLabServer:
    def __init__(self, *, env_extra: dict | None = None, data_dir: str | None = None, port: int | None = None,
                 web_processes: int = 1):
        self.web_processes = web_processes
        self.webs: list[subprocess.Popen] = []
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kernellab-browser-")
        self.own_data_dir = data_dir is None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
        env.update({"KERNELLAB_DATA_DIR": self.data_dir, "DEBUG": "0", "DJANGO_SETTINGS_MODULE": "kernellab.settings",
                    "PYTHONUNBUFFERED": "1", "KERNELLAB_POLL_INTERVAL_S": "0.1"})
        env.update(env_extra or {})
        self.env = env
        self.log_path = Path(self.data_dir) / "daphne.log"
        self.web: subprocess.Popen | None = None
        self.feeder: Feeder | None = None

    def migrate(self) -> None:
        subprocess.run([PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=self.env, check=True)

    def start(self) -> None:
        from kernellab.management.commands.serve import web_commands, web_environment

        log = open(self.log_path, "a")
        commands, self.listeners = web_commands("127.0.0.1", self.port, self.web_processes)
        self.webs = [subprocess.Popen(command, cwd=ROOT, env=web_environment(self.env), stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, pass_fds=fds) for command, fds in commands]
        self.web = self.webs[0]
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.web.poll() is not None:
                raise RuntimeError(f"daphne exited with {self.web.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"daphne did not answer on {self.url} within 60 s")

    def start_worker(self, queues: list[str]) -> None:
        """A Celery worker on the server's broker and database, as `manage.py serve` starts one."""
        log = open(Path(self.data_dir) / "worker.log", "a")
        self.worker = subprocess.Popen(
            [PYTHON, "-m", "celery", "-A", "kernellab", "worker", "-Q", ",".join(queues), "--concurrency", "2",
             "--loglevel", "INFO", "-n", f"browser-{os.getpid()}@%h"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def stop_worker(self) -> None:
        worker = getattr(self, "worker", None)
        if worker and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()

    def stop(self) -> None:
        for web in self.webs:
            if web.poll() is None:
                os.killpg(web.pid, signal.SIGTERM)
        for web in self.webs:
            try:
                web.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(web.pid, signal.SIGKILL)
                web.wait()
        self.webs = []
        self.web = None
        for listener in getattr(self, "listeners", []):
            listener.close()
        self.listeners = []

    def __enter__(self) -> "KernelLabServer":
        self.migrate()
        self.feeder = Feeder(self.env)
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_worker()
        self.stop()
        if self.feeder:
            self.feeder.close()
        if self.own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


def login(page, server: KernelLabServer, username: str, password: str) -> None:
    page.goto(server.url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
