"""Start KernelLab: the ASGI web server and, unless told otherwise, a local Celery worker."""
from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernellab.config import StartupError, check_services
from kernellab.management.database import require_migrated_database


def local_gpu_queue() -> str | None:
    """gpu.<model> for this machine's GPU ('NVIDIA H200' -> gpu.h200, 'NVIDIA H100 80GB HBM3' -> gpu.h100: the queue
    a run targeting that model sends to, as the launcher names it), or None without one."""
    from gpu_runner import gpu_present
    from gpu_runner.result import gpu_model_slug

    if not gpu_present():
        return None
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not name:
        return None
    return "gpu." + gpu_model_slug(name)


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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if count <= 1:
        # daphne binds the port itself, where a failure is only a line in its log: tried here first, so that a port
        # in use or a host that is not this machine's is serve's sentence, before anything has started.
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(_listen_failure(host, port, exc)) from None
        finally:
            probe.close()
        return [([sys.executable, "-m", "daphne", "-b", host, "-p", str(port), app], ())], []
    listeners = []
    try:
        for _ in range(count):
            listener = socket.socket(family, socket.SOCK_STREAM)
            listeners.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind((host, port))
            port = listener.getsockname()[1]  # port 0: the others join the port the first one got
            listener.listen(1024)
            listener.set_inheritable(True)
    except OSError as exc:
        for listener in listeners:
            listener.close()
        raise CommandError(_listen_failure(host, port, exc)) from None
    return [([sys.executable, "-m", "daphne", "--fd", str(s.fileno()), app], (s.fileno(),)) for s in listeners], listeners


def _listen_failure(host: str, port: int, exc: OSError) -> str:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"Cannot listen on {address}: {(exc.strerror or str(exc)).rstrip('.')}."


def port_number(value: str) -> int:
    """--port: a TCP port, 0 (any free one) to 65535, refused when the arguments are read."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 65535, not {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, not {port}")
    return port


def process_count(value: str) -> int:
    """--web-processes: at least one, as KERNELLAB_WEB_PROCESSES (kernellab.config.web_processes) must be."""
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {value!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {count}")
    return count


class ChildProcesses:
    """The processes serve starts, each the leader of its own session and process group, so that stopping
    reaches everything a child started: a Celery worker's pool processes and its embedded beat (`-B`),
    which outlive a worker whose shutdown went wrong (a pool process killed at a task's hard time limit and
    replaced, then a stop) and would keep sending the schedule's tasks forever; a web process's compile
    servers. Ctrl-C in a terminal reaches serve alone (the children are in other process groups); serve
    stops them.

    stop(): SIGTERM to each leader (the worker's warm shutdown, daphne's close), up to `timeout` seconds
    for them to exit; then SIGTERM to whatever is left in their groups and `grace` seconds; then SIGKILL
    to the groups. Safe to call more than once and from an atexit hook."""

    def __init__(self, *, timeout: float = 20.0, grace: float = 3.0):
        self.timeout = timeout
        self.grace = grace
        self.processes: list[subprocess.Popen] = []
        self._stopping = False

    def start(self, command: list[str], **popen_kwargs) -> subprocess.Popen:
        process = subprocess.Popen(command, start_new_session=True, preexec_fn=_exit_with_parent, **popen_kwargs)
        self.processes.append(process)
        return process

    @property
    def stopping(self) -> bool:
        return self._stopping

    def groups_alive(self) -> list[int]:
        """The process groups of our children that still have a live (not zombie) process."""
        return [p.pid for p in self.processes if group_alive(p.pid)]

    def signal_groups(self, signum: int) -> None:
        for process in self.processes:
            _killpg(process.pid, signum)

    def end_group(self, process: subprocess.Popen) -> None:
        """End what is left of one child's group (its leader has exited: a dead worker's pool processes and embedded
        beat would otherwise run on beside its replacement), then forget the child."""
        if group_alive(process.pid):
            _killpg(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + self.grace
            while group_alive(process.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            _killpg(process.pid, signal.SIGKILL)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if process in self.processes:
            self.processes.remove(process)

    def request_stop(self) -> None:
        """From a signal handler: the first request asks the leaders to stop, the next kills the groups."""
        if self._stopping:
            self.signal_groups(signal.SIGKILL)
            return
        self._stopping = True
        for process in self.processes:
            if process.poll() is None:
                _kill(process, signal.SIGTERM)

    def stop(self) -> None:
        self._stopping = True
        for process in self.processes:
            if process.poll() is None:
                _kill(process, signal.SIGTERM)
        deadline = time.monotonic() + self.timeout
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if self.groups_alive():
            self.signal_groups(signal.SIGTERM)
            deadline = time.monotonic() + self.grace
            while self.groups_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        for pgid in self.groups_alive():
            _killpg(pgid, signal.SIGKILL)
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # in uninterruptible sleep (D): the kernel ends it eventually
                pass


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a process that is not a zombie (a killed process that no one
    has reaped yet still counts for killpg(pgid, 0), and the leader is reaped only by our wait())."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in {"Z", "X"}:
            return True
    return False


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(process: subprocess.Popen, signum: int) -> None:
    try:
        process.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass


def _libc_prctl():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # looked up here, not in the forked child (no imports between fork and exec)


def _exit_with_parent() -> None:
    """In the child, before exec: SIGTERM it when serve dies, even by SIGKILL (Linux; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


class ProcessKeeper:
    """Restarts one child of serve when it dies while serve runs, after ending what is left of its process group. One
    that dies `limit` times within `window` seconds is not restarted again: serve says so and stops (CommandError), so
    that a supervisor sees a failure rather than a server that looks healthy and is not."""

    what = "A child process"
    consequence = "it keeps failing"

    def __init__(self, children: ChildProcesses, command: list[str], *, say, limit: int = 5, window: float = 300.0,
                 **popen_kwargs):
        self.children = children
        self.command = command
        self.popen_kwargs = popen_kwargs
        self.say = say
        self.limit = limit
        self.window = window
        self.deaths: list[float] = []
        self.process = children.start(command, **popen_kwargs)

    def restarts(self, code: int) -> bool:
        """Whether a child that ended with this code is started again (else check raises CommandError)."""
        return True

    def check(self) -> None:
        """Called every half second while serve runs; raises CommandError when it gives up."""
        code = self.process.poll()
        if code is None or self.children.stopping:
            return
        self.children.end_group(self.process)
        if not self.restarts(code):
            raise CommandError(f"{self.what} exited (code {code}); its log is above.")
        now = time.monotonic()
        self.deaths = [t for t in self.deaths if now - t < self.window] + [now]
        span = f"{self.window / 60:g} minutes" if self.window >= 120 else f"{self.window:g} seconds"
        if len(self.deaths) >= self.limit:
            raise CommandError(f"{self.what} exited {len(self.deaths)} times in {span} (last exit code {code}); "
                               f"its log is above. Stopping, since {self.consequence}.")
        self.say(f"{self.what} exited (code {code}); starting a new one "
                 f"(restart {len(self.deaths)} of at most {self.limit - 1} in {span}).")
        self.process = self.children.start(self.command, **self.popen_kwargs)


class WorkerKeeper(ProcessKeeper):
    """The local worker: restarted whatever ended it (a crash on a broker reconnect, the out-of-memory killer), so
    that runs keep advancing."""

    what = "The local worker"
    consequence = "no run could advance"


class WebKeeper(ProcessKeeper):
    """A web process killed by a signal (the out-of-memory killer, an operator's kill) is started again on the same
    port (or the same inherited socket), so one process's death does not take the site down. One that exits by itself
    with an error (it could not listen after all, it failed to start) is not: that would fail again, and serve stops
    with an exit status a supervisor can act on. A clean exit (0) ends serve quietly."""

    what = "The web server"
    consequence = "the site keeps failing"

    def restarts(self, code: int) -> bool:
        return code < 0


class Command(BaseCommand):
    help = "Serve KernelLab at http://HOST:PORT with a local worker (search, replay and the local GPU's queue)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=port_number, default=8000, help="0 to 65535 (default 8000)")
        parser.add_argument("--no-worker", action="store_true", help="do not start a local Celery worker")
        parser.add_argument("--web-processes", type=process_count, default=None,
                            help="daphne processes sharing the port (default: KERNELLAB_WEB_PROCESSES or 1)")

    def handle(self, *args, host: str, port: int, no_worker: bool, web_processes: int | None = None, **options):
        try:
            check_services()
        except StartupError as exc:
            raise CommandError(str(exc)) from None
        require_migrated_database()
        count = web_processes if web_processes is not None else settings.KERNELLAB_WEB_PROCESSES  # (kernellab.config)
        webs, listeners = web_commands(host, port, count)  # binds (or tries) now; the sockets stay open while they serve
        from gpu_runner.compile_sandbox import SandboxUnavailable, sandbox_status

        try:
            status = sandbox_status()
        except SandboxUnavailable as exc:
            raise CommandError(str(exc)) from None
        style = self.style.SUCCESS if status.mode == "bwrap" else self.style.WARNING
        self.stdout.write(style(f"Compiles: {status.reason}."))
        children = ChildProcesses()
        atexit.register(children.stop)  # whatever way serve ends, short of SIGKILL (PR_SET_PDEATHSIG covers that)

        def stop(signum, frame):
            children.request_stop()

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stop)  # SIGHUP: the terminal closed, which the children in their sessions miss
        keeper = None
        try:
            if not no_worker:
                queues = ["search", "replay"]
                gpu_queue = local_gpu_queue()
                if gpu_queue:
                    queues.append(gpu_queue)
                keeper = WorkerKeeper(children, worker_command(queues), say=lambda text: self.stderr.write(self.style.WARNING(text)))
                self.stdout.write(f"Local worker consuming {', '.join(queues)}.")
            self.stdout.write(self.style.SUCCESS(f"KernelLab at http://{host}:{port}/"
                                                 + (f" ({count} web processes)" if count > 1 else "")))
            say = lambda text: self.stderr.write(self.style.WARNING(text))  # noqa: E731
            web_keepers = [WebKeeper(children, command, say=say, pass_fds=fds, env=web_environment(dict(os.environ)))
                           for command, fds in webs]
            while not children.stopping:  # until a signal (the web may not stop by itself) or a web process ends
                if any(web.process.poll() == 0 for web in web_keepers):
                    break  # a web process that stopped by itself, cleanly: serve stops too
                for web in web_keepers:
                    web.check()  # a killed one is started again; a failed one is serve's CommandError
                if keeper is not None:
                    keeper.check()
                time.sleep(0.5)
        finally:
            children.stop()
            atexit.unregister(children.stop)
