"""Every compile of submitted source runs where it can read only the toolkit and the allowed headers.

nvcc runs under bubblewrap (Debian's `bubblewrap` package): a new mount namespace with `/usr` (the
host compiler, the system headers and a system CUDA toolkit), the toolkit that `find_tool` chose, the
allowed include directories (the CUTLASS/CuTe headers and KERNELLAB_INCLUDE_DIR) read-only, the compile's scratch folder as the only
writable place, an empty /tmp, no network, no other process, and a cleared environment. Files such as
the project's `data/` folder, `/etc` or a home directory do not exist inside it.

KERNELLAB_COMPILE_SANDBOX chooses: `auto` (bubblewrap where it works, else unsandboxed with the
directive check and the log redaction still on; `sandbox_status()` says which, and the web tier's
deploy check warns), `bwrap` (refuse to compile without it), `none`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .directives import allowed_include_dirs


class SandboxUnavailable(RuntimeError):
    """KERNELLAB_COMPILE_SANDBOX=bwrap, and bubblewrap is missing or cannot create namespaces here."""


@dataclass(frozen=True)
class SandboxStatus:
    mode: str          # "bwrap" or "none"
    reason: str        # why, in a sentence


def _setting() -> str:
    value = os.environ.get("KERNELLAB_COMPILE_SANDBOX", "auto").strip().lower() or "auto"
    if value not in ("auto", "bwrap", "none"):
        raise SandboxUnavailable(f"KERNELLAB_COMPILE_SANDBOX is {value!r}; use auto, bwrap or none.")
    return value


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def toolkit_roots(tools: Sequence[str]) -> list[str]:
    """The folders a compile needs outside /usr: each tool's toolkit root (two levels above bin/)."""
    roots = []
    for tool in tools:
        real = Path(tool).resolve()
        root = real.parent.parent
        if not str(root).startswith("/usr/") and str(root) not in roots:
            roots.append(str(root))
    return roots


def _bwrap_command(argv: Sequence[str], scratch: str, read_only: Sequence[str]) -> list[str]:
    command = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
               "--clearenv", *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in read_only:
        if os.path.exists(path):
            command += ["--ro-bind", path, path]
    for secret in _hidden_inside(read_only):
        command += ["--tmpfs", secret]
    bin_dirs = [os.path.dirname(argv[0])] + [os.path.join(p, "bin") for p in read_only]
    command += ["--bind", scratch, scratch, "--chdir", scratch,
                "--setenv", "PATH", os.pathsep.join(bin_dirs + ["/usr/local/bin", "/usr/bin", "/bin"]),
                "--setenv", "HOME", scratch, "--setenv", "TMPDIR", scratch, "--setenv", "LANG", "C.UTF-8"]
    return command + ["--", *argv]


def _hidden_inside(read_only: Sequence[str]) -> list[str]:
    """The data folder and home, where they lie inside a bound folder, are covered by an empty one."""
    bound = [Path("/usr"), *(Path(p) for p in read_only)]
    hidden = []
    for value in (os.environ.get("KERNELLAB_DATA_DIR"), os.environ.get("HOME")):
        if not value:
            continue
        path = Path(value).resolve()
        if path.is_dir() and any(path == b or b in path.parents for b in bound) and path != Path("/usr"):
            hidden.append(str(path))
    return hidden


@lru_cache(maxsize=1)
def _bwrap_works() -> str:
    """'' when bubblewrap can make a sandbox here, else the reason it cannot."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    try:
        probe = subprocess.run(_bwrap_command(["/usr/bin/true"], "/tmp", []), capture_output=True, text=True,
                               timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if probe.returncode != 0:
        return f"bubblewrap cannot create a sandbox here: {probe.stderr.strip()[-200:]}"
    return ""


def sandbox_status() -> SandboxStatus:
    setting = _setting()
    if setting == "none":
        return SandboxStatus("none", "compiles are not sandboxed (KERNELLAB_COMPILE_SANDBOX=none)")
    problem = _bwrap_works()
    if not problem:
        return SandboxStatus("bwrap", "compiles run in a bubblewrap sandbox (toolkit and allowed headers only)")
    if setting == "bwrap":
        raise SandboxUnavailable(f"KERNELLAB_COMPILE_SANDBOX=bwrap but {problem}.")
    return SandboxStatus("none", f"compiles are not sandboxed: {problem}")


def sandboxed(argv: Sequence[str], scratch: str, tools: Sequence[str] = (), read_only_dirs: Sequence[str] = ()) -> list[str]:
    """`argv` wrapped so that it sees only the toolkit, the allowed headers, `read_only_dirs` and
    `scratch` (writable)."""
    if sandbox_status().mode != "bwrap":
        return list(argv)
    read_only = toolkit_roots([argv[0], *tools])
    read_only += [str(extra) for extra in read_only_dirs if str(extra) not in read_only]
    read_only += [str(extra) for extra in allowed_include_dirs() if str(extra) not in read_only]
    return _bwrap_command(argv, scratch, read_only)
