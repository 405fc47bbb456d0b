"""Start KernelLab: the ASGI web server and, unless told otherwise, a local Celery worker."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernellab.config import StartupError, check_services


def local_gpu_queue() -> str | None:
    """gpu.<model> for this machine's GPU ('NVIDIA H200' -> gpu.h200), or None without one."""
    from gpu_runner import gpu_present
    from gpu_runner.result import Hardware

    if not gpu_present():
        return None
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not name:
        return None
    return "gpu." + Hardware(name=name, sm_count=0, memory_bytes=0, memory_bandwidth_gbs=0, sm_clock_mhz=0,
                             mem_clock_mhz=0, compute_capability="", driver="").slug


def worker_command(queues: list[str], concurrency: int = 2) -> list[str]:
    beat_schedule = str(settings.DATA_DIR / "celerybeat-schedule")
    return [
        sys.executable, "-m", "celery", "-A", "kernellab", "worker", "-B", "-s", beat_schedule,
        "-Q", ",".join(queues), "--concurrency", str(concurrency), "--loglevel", "INFO",
        "-n", f"local-{os.getpid()}@%h",
    ]


def web_environment(base: dict[str, str]) -> dict[str, str]:
    """A web process's environment: glibc gets two malloc arenas instead of one per thread (each
    websocket has a thread for its database work), so memory freed after a burst can be returned."""
    return {"MALLOC_ARENA_MAX": "2", **base}


def web_commands(host: str, port: int, count: int) -> tuple[list[tuple[list[str], tuple[int, ...]]], list[socket.socket]]:
    """daphne commands for `count` processes: one binds the port itself; several each get their own
    listening socket on the same port (SO_REUSEPORT), so the kernel spreads new connections over them
    by address. One shared socket would not: whichever process is awake takes nearly every keep-alive
    connection and websocket. Every process reads the same database and channel layer."""
    app = "kernellab.asgi:application"
    if count <= 1:
        return [([sys.executable, "-m", "daphne", "-b", host, "-p", str(port), app], ())], []
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners = []
    for _ in range(count):
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((host, port))
        port = listener.getsockname()[1]  # port 0: the others join the port the first one got
        listener.listen(1024)
        listener.set_inheritable(True)
        listeners.append(listener)
    return [([sys.executable, "-m", "daphne", "--fd", str(s.fileno()), app], (s.fileno(),)) for s in listeners], listeners


class Command(BaseCommand):
    help = "Serve KernelLab at http://HOST:PORT with a local worker (search, replay and the local GPU's queue)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true", help="do not start a local Celery worker")
        parser.add_argument("--web-processes", type=int, default=None,
                            help="daphne processes sharing the port (default: KERNELLAB_WEB_PROCESSES or 1)")

    def handle(self, *args, host: str, port: int, no_worker: bool, web_processes: int | None = None, **options):
        try:
            check_services()
        except StartupError as exc:
            raise CommandError(str(exc)) from None
        from gpu_runner.compile_sandbox import SandboxUnavailable, sandbox_status

        try:
            status = sandbox_status()
        except SandboxUnavailable as exc:
            raise CommandError(str(exc)) from None
        style = self.style.SUCCESS if status.mode == "bwrap" else self.style.WARNING
        self.stdout.write(style(f"Compiles: {status.reason}."))
        processes: list[subprocess.Popen] = []
        if not no_worker:
            queues = ["search", "replay"]
            gpu_queue = local_gpu_queue()
            if gpu_queue:
                queues.append(gpu_queue)
            processes.append(subprocess.Popen(worker_command(queues)))
            self.stdout.write(f"Local worker consuming {', '.join(queues)}.")
        count = web_processes or int(os.environ.get("KERNELLAB_WEB_PROCESSES", "1") or 1)
        self.stdout.write(self.style.SUCCESS(f"KernelLab at http://{host}:{port}/"
                                             + (f" ({count} web processes)" if count > 1 else "")))
        webs, listeners = web_commands(host, port, count)  # the sockets stay open while they serve
        for command, fds in webs:
            processes.append(subprocess.Popen(command, pass_fds=fds, env=web_environment(dict(os.environ))))
        web = processes[-1]

        def stop(signum, frame):
            for process in processes:
                if process.poll() is None:
                    process.terminate()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            web.wait()
        finally:
            stop(None, None)
            for process in processes:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
