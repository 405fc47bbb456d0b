"""Run work in a child process that may hang, crash or eat memory without taking the parent along.

The child is a fresh interpreter (`python -m gpu_runner.sandbox FD module:function ARGS...`) in its
own process group, talking over a socket pair. The parent enforces:
- a wall-time limit per request (the child's process group is killed with SIGKILL when it passes);
- a host-memory limit by watching the child's resident set size every 50 ms. RLIMIT_AS cannot be
  used: a CUDA process reserves far more virtual address space than it will ever touch. GPU memory
  is limited inside the worker instead (a cap on its allocator, and a check of each candidate's
  buffer sizes before anything is allocated).
A crash (signal or exit) is reported with its cause; the next request starts a fresh child.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Sequence


class SandboxFault(RuntimeError):
    """The child did not answer: `kind` is timeout, crash or host-memory."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process died from {name}"
    return f"the worker process exited with code {code}"


class Sandbox:
    def __init__(self, target: str, args: Sequence[str] = (), *, host_memory_bytes: int = 16 << 30,
                 env: dict[str, str] | None = None, extra_path: Sequence[str] = ()):
        self.target = target
        self.args = list(args)
        self.host_memory_bytes = host_memory_bytes
        self.env = env
        self.extra_path = list(extra_path)
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.restarts = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 180.0) -> Any:
        """Start the child and return its first message (the hello)."""
        self.close()
        parent_sock, child_sock = socket.socketpair()
        env = dict(os.environ if self.env is None else self.env)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root, *self.extra_path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpu_runner.sandbox", str(child_sock.fileno()), self.target, *self.args],
            pass_fds=(child_sock.fileno(),), env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.restarts += 1
        return self._wait(timeout_s)

    def request(self, message: Any, timeout_s: float) -> Any:
        """Send `message` and wait for the answer; raise SandboxFault (and kill the child) if none comes."""
        if not self.alive or self.conn is None:
            raise SandboxFault("crash", "the worker is not running")
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            fault = SandboxFault("crash", _describe_exit(self.process.wait(5) if self.process else None))
            self.kill()
            raise fault from None
        return self._wait(timeout_s)

    def _wait(self, timeout_s: float) -> Any:
        assert self.process is not None and self.conn is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ready = self.conn.poll(0.05)
            except (OSError, EOFError):
                ready = True
            if ready:
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    code = self._reap()
                    self.kill()
                    raise SandboxFault("crash", _describe_exit(code)) from None
            if self.process.poll() is not None:
                code = self.process.returncode
                self.kill()
                raise SandboxFault("crash", _describe_exit(code))
            rss = _rss_bytes(self.process.pid)
            if rss > self.host_memory_bytes:
                self.kill()
                raise SandboxFault("host-memory", f"the worker used {rss / 2**30:.2f} GiB of host memory, over the "
                                                  f"limit of {self.host_memory_bytes / 2**30:.2f} GiB")
            if time.monotonic() > deadline:
                self.kill()
                raise SandboxFault("timeout", f"no answer within {timeout_s:g} s")

    def _reap(self) -> int | None:
        try:
            return self.process.wait(timeout=5) if self.process else None
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def close(self) -> None:
        """Ask the child to exit, then make sure it has."""
        if self.alive and self.conn is not None:
            try:
                self.conn.send(("exit", None))
                self.process.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.process = None


def _child_main(argv: list[str]) -> None:
    import importlib

    fd, target, *args = argv
    conn = Connection(int(fd))
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    function(conn, *args)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
