"""The NVRTC engine behind `compiler.compile_cubin`: which sources it compiles, with which flags, where.

nvcc spends most of a small kernel's compile in the host preprocessor and in parsing the runtime
headers (0.3-0.5 s); NVRTC compiles the same kernel to a cubin for the same architecture in 30-100 ms,
in a process that stays up. Which engine
compiles a source is a pure function of the source and its options (`choose_engine`), so the check,
the verification, the recorder and the benchmarks all compile a given source the same way:

- nvcc for CUTLASS/CuTe sources, for sources that include a header NVRTC does not serve (the C/C++
  standard library, cuda_runtime.h, cub/cub.cuh...: see NVRTC_HEADERS), and for sources that use a
  name that only nvcc's implicit host headers declare (`std::`, int64_t, uint, INFINITY, M_PI,
  INT_MAX, cuda* runtime functions, `<<<`: see _NVCC_ONLY_NAMES);
- NVRTC for everything else, when a libnvrtc is found (`find_nvrtc`, nvcc's own release preferred);
  where none is, nvcc, and the report's log says why.

The report's `compiler` ("nvrtc 13.0.88" or "nvcc 13.0.88") says which engine built a cubin and is
part of the cache key. NVRTC's code is nvcc's for most sources but not all (NVRTC's built-in device
headers and its NVVM settings differ: gpu_runner/README.md has the measured parity), so a source is always
compiled by the same engine, and KERNELLAB_COMPILE_ENGINE=nvcc gives nvcc's code everywhere.

NVRTC reads the files a source includes, so it runs in persistent compile servers
(`gpu_runner/nvrtc_server.py`) inside the compile sandbox, one request at a time per server, as many
servers as cores; a server that dies or outlives a request's timeout is killed and replaced.
"""
from __future__ import annotations

import atexit
import base64
import glob
import os
import queue
import re
import select
import shutil
import struct
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from concurrent.futures import Future
from typing import Callable, Sequence

from .compile_sandbox import sandboxed
from .cutlass_headers import uses_cutlass
from .directives import included_headers

SERVER_SCRIPT = Path(__file__).with_name("nvrtc_server.py")

# Headers NVRTC compiles as nvcc does (device headers of the toolkit and CCCL's device parts);
# tests/gpu_runner/test_nvrtc.py compiles each with NVRTC.
NVRTC_HEADERS = frozenset({
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "mma.h", "cooperative_groups.h",
    "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h", "cooperative_groups/scan.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h",
    "cuda/pipeline", "cuda/barrier", "cuda/atomic", "cuda/ptx", "cuda/annotated_ptr", "vector_types.h",
    "vector_functions.h", "math_constants.h", "device_launch_parameters.h",
})
_NVRTC_HEADER_DIRS = ("cuda/std/",)
# Names nvcc's implicit `#include "cuda_runtime.h"` (and the host headers it pulls in) declares and
# NVRTC does not: a source using one compiles with nvcc, where it means what its author meant.
_NVCC_ONLY_NAMES = re.compile(
    r"(?<!::)\bstd::|<<<|\b(?:u?int(?:8|16|32|64)_t|u?intptr_t|INFINITY|NAN|HUGE_VALF?|FLT_[A-Z_]+|DBL_[A-Z_]+|"
    r"[SU]?(?:CHAR|SHRT|INT|LONG|LLONG)_(?:MAX|MIN|BIT)|uint|ulong|ushort|u_(?:char|short|int|long)|M_[A-Z0-9_]+|RAND_MAX|"
    r"MAXFLOAT|EXIT_(?:SUCCESS|FAILURE)|cuda[A-Z]\w*)\b")


# How an answer that is not the source's own verdict begins (a timeout, a crash): never cached.
NVRTC_TRANSIENT = ("NVRTC did not finish", "NVRTC crashed")
_SHARED = re.compile(r"\b__shared__\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class NvrtcUnavailable(RuntimeError):
    """No usable libnvrtc, or a compile server could not start."""


@dataclass(frozen=True)
class Engine:
    name: str      # "nvrtc" or "nvcc"
    reason: str    # why, in a phrase


def source_engine(source: str) -> Engine:
    """The engine the source itself calls for, before looking at what this machine has."""
    if uses_cutlass(source):
        return Engine("nvcc", "the source uses CUTLASS/CuTe")
    for header in included_headers(source):
        if header not in NVRTC_HEADERS and not header.startswith(_NVRTC_HEADER_DIRS):
            return Engine("nvcc", f"the source includes <{header}>, which NVRTC does not serve")
    from .directives import translate

    text = translate(source)
    match = _NVCC_ONLY_NAMES.search(text)
    if match:
        return Engine("nvcc", f"the source uses {match.group(0).strip()!s}, which only nvcc's host headers declare")
    if _SHARED.search(_COMMENTS.sub(" ", text)):
        # NVRTC 13.0 addresses shared memory with 64-bit pointers where nvcc uses 32-bit ones: in the parity
        # sample every source whose code differed from nvcc's declared shared memory, and every source without
        # any got nvcc's exact code (gpu_runner/README.md, "Compile engines"). Such a source keeps nvcc's code.
        return Engine("nvcc", "the source declares __shared__ memory, whose code NVRTC 13.0 makes differently")
    return Engine("nvrtc", "the source needs only what NVRTC offers")


def choose_engine(source: str, options: Sequence[str] = ()) -> Engine:
    """nvcc or NVRTC for `source` on this machine (see the module's docstring). Of the options only
    --extended-lambda changes the choice (NVRTC has no such option and refuses `__device__` lambdas):
    every other option a candidate may give has an NVRTC spelling (candidate.nvrtc_options).

    KERNELLAB_COMPILE_ENGINE=nvcc makes every compile use nvcc (an operator's switch, and the
    benchmark's baseline); `auto` (the default) lets the source choose."""
    setting = os.environ.get("KERNELLAB_COMPILE_ENGINE", "auto").strip().lower() or "auto"
    if setting not in ("auto", "nvcc"):
        raise ValueError(f"KERNELLAB_COMPILE_ENGINE is {setting!r}; use auto or nvcc.")
    if setting == "nvcc":
        return Engine("nvcc", "KERNELLAB_COMPILE_ENGINE=nvcc")
    engine = source_engine(source)
    if engine.name == "nvcc":
        return engine
    from .candidate import needs_nvcc

    reason = needs_nvcc(list(options))
    if reason:
        return Engine("nvcc", reason)
    library, problem = find_nvrtc()
    if library is None:
        return Engine("nvcc", f"NVRTC is unavailable: {problem}")
    return engine


# --- finding libnvrtc -----------------------------------------------------------------------------
@dataclass(frozen=True)
class NvrtcLibrary:
    path: str
    version: str    # "13.0.88" where the wheel or the file name says it, else "13.0" from nvrtcVersion
    origin: str     # where it was found, for messages

    @property
    def label(self) -> str:
        return f"nvrtc {self.version}"


def _wheel_libraries() -> list[tuple[str, str]]:
    found = []
    for base in sys.path:
        paths = sorted(glob.glob(os.path.join(base, "nvidia", "cu1*", "lib", "libnvrtc.so.*")))
        paths += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.*")))
        for path in paths:
            if ".alt." not in path and (path, "the nvidia-cuda-nvrtc wheel") not in found:
                found.append((path, "the nvidia-cuda-nvrtc wheel"))
    return found


def _version_of(path: str) -> str | None:
    """The full release of a libnvrtc from its wheel's metadata or its real file name."""
    real = os.path.realpath(path)
    match = re.search(r"libnvrtc\.so\.(\d+\.\d+\.\d+)$", real)
    if match:
        return match.group(1)
    site = Path(path).parents[3] if len(Path(path).parents) > 3 else None
    if site is not None:
        for info in sorted(site.glob("nvidia_cuda_nvrtc-*.dist-info")):
            match = re.match(r"nvidia_cuda_nvrtc-([\d.]+)\.dist-info$", info.name)
            if match:
                return match.group(1)
    return None


def _loaded_version(path: str) -> str | None:
    """major.minor from nvrtcVersion, loading the library in this process (it reads no source)."""
    try:
        from .nvrtc_server import load_nvrtc, nvrtc_version
        major, minor = nvrtc_version(load_nvrtc(path))
        return f"{major}.{minor}"
    except OSError:
        return None


def _candidates() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    found += _wheel_libraries()
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    try:
        from .compiler import find_tool
        homes.append(str(Path(find_tool("nvcc")).resolve().parent.parent))
    except Exception:  # noqa: BLE001 - no nvcc: the loader's default is still tried
        pass
    homes.append("/usr/local/cuda")
    lib_dirs = []
    for home in homes:
        if home:
            lib_dirs += [os.path.join(home, "lib64")] + sorted(glob.glob(os.path.join(home, "targets", "*", "lib")))
    try:   # where nvcc's own headers are (a wrapper script's folder says nothing), the libraries are beside
        lib_dirs += [os.path.join(os.path.dirname(d), "lib") for d in toolkit_include_dirs() if d.endswith("include")]
    except Exception:  # noqa: BLE001 - nvcc missing or not running
        pass
    for lib_dir in dict.fromkeys(lib_dirs):
        home = os.path.dirname(lib_dir)
        for path in sorted(glob.glob(os.path.join(lib_dir, "libnvrtc.so.*"))):
            if ".alt." not in path and re.search(r"libnvrtc\.so\.\d+$", path) and \
                    all(os.path.realpath(path) != os.path.realpath(p) for p, _ in found):
                found.append((path, f"the toolkit in {home}"))
    import ctypes.util
    default = ctypes.util.find_library("nvrtc")
    if default:
        found.append((default, "the loader's default path"))
    return found


def find_nvrtc() -> tuple[NvrtcLibrary | None, str]:
    """(the libnvrtc to use, '') or (None, why none is used).

    $KERNELLAB_NVRTC names one outright. Otherwise the nvidia-cuda-nvrtc wheel, CUDA_HOME/lib64 (and
    the chosen nvcc's toolkit), then the loader's default are looked at; the first one of nvcc's own
    release is taken, else the first one found (its release is in every report's `compiler`, so a
    build is never taken for another). The same release is preferred because it is the closest to
    nvcc's code; even then NVRTC's code differs from nvcc's for some sources (gpu_runner/README.md, "Compile engines")."""
    override = os.environ.get("KERNELLAB_NVRTC", "").strip()
    try:
        from .compiler import nvcc_version
        wanted = nvcc_version()
    except Exception:  # noqa: BLE001 - ToolMissing, or nvcc that does not run: any release will do
        wanted = ""
    return _find_nvrtc(override, wanted)


@lru_cache(maxsize=8)
def _find_nvrtc(override: str, wanted: str) -> tuple[NvrtcLibrary | None, str]:
    if override:
        if "/" in override and not os.path.exists(override):
            return None, f"KERNELLAB_NVRTC={override} does not exist"
        version = _version_of(override) or _loaded_version(override)
        if version is None:
            return None, f"KERNELLAB_NVRTC={override} could not be loaded"
        return NvrtcLibrary(override, version, "KERNELLAB_NVRTC"), ""
    found = []
    for path, origin in _candidates():
        version = _version_of(path) or _loaded_version(path)
        if version is not None:
            found.append(NvrtcLibrary(path, version, origin))
    if not found:
        return None, "no libnvrtc was found (pip install nvidia-cuda-nvrtc, or set KERNELLAB_NVRTC)"
    for library in found:
        if library.version == wanted or (library.version.count(".") == 1 and wanted.startswith(library.version + ".")):
            return library, ""
    return found[0], ""


@lru_cache(maxsize=1)
def toolkit_include_dirs() -> tuple[str, ...]:
    """The folders nvcc itself searches for the toolkit's headers (its INCLUDES and SYSTEM_INCLUDES,
    read from `nvcc --dryrun`), for NVRTC's -I: the same cuda/, cooperative_groups/ and CCCL headers
    as nvcc's. NVRTC's own built-in headers (cuda_fp16.h...) come first, as they do in NVRTC."""
    from .compiler import _tool_env, find_tool

    out = subprocess.run([find_tool("nvcc"), "--dryrun", "-cubin", "-arch=sm_90", "-o", os.devnull, "kernel.cu"],
                         capture_output=True, text=True, timeout=60, env=_tool_env())
    dirs: list[str] = []
    for line in (out.stdout + out.stderr).splitlines():
        match = re.match(r"^#\$ (?:SYSTEM_)?INCLUDES=(.*)$", line.strip())
        if match:
            for value in re.findall(r'"([^"]*)"', match.group(1)):
                path = value[2:] if value.startswith("-I") else value
                if path and not path.startswith("-") and os.path.isdir(path):
                    dirs.append(os.path.normpath(path))
    return tuple(dict.fromkeys(dirs))


# --- flags --------------------------------------------------------------------------------------------
def nvrtc_flags(options: Sequence[str], arch: str) -> list[str]:
    """NVRTC's flags for nvcc's `-cubin -arch=ARCH -O3 -std=c++17 -Xptxas -v` plus the candidate's
    options. nvcc's -O3 is a host-code option; NVRTC optimises device code (-dopt) and runs ptxas at
    -O3 by default, as nvcc does. The candidate's options are already NVRTC spellings
    (candidate.nvrtc_options, which refuses anything else); its -arch=sm_XXa wins over `arch`."""
    from .candidate import arch_option, nvrtc_options

    translated = nvrtc_options(list(options))
    arch = arch_option(list(options)) or arch
    rest = [o for o in translated if not o.startswith("--gpu-architecture=")]
    std = [] if any(o.startswith("--std=") for o in rest) else ["--std=c++17"]
    return [f"--gpu-architecture={arch}", *std, "--ptxas-options=-v", *rest]


# --- the server pool ------------------------------------------------------------------------------------
@dataclass
class ServerAnswer:
    ok: bool
    log: str
    cubin: bytes | None
    sass_dump: str | None
    sass_error: str | None


class _Server:
    def __init__(self, library: NvrtcLibrary, cuobjdump: str | None):
        self.scratch = tempfile.mkdtemp(prefix="kl-nvrtc-")
        # A bare name ("libnvrtc.so.13", the loader's default) is found by the loader under /usr.
        lib_path = os.path.realpath(library.path) if "/" in library.path else library.path
        tools, read_only, nvdisasm_dir = [], [str(SERVER_SCRIPT), *toolkit_include_dirs()], ""
        if "/" in lib_path:
            read_only.append(os.path.dirname(lib_path))
        env = dict(os.environ)
        if cuobjdump:
            from .compiler import ToolMissing, _tool_env, find_tool
            tools.append(cuobjdump)
            try:
                nvdisasm_dir = os.path.dirname(find_tool("nvdisasm"))
                read_only.append(nvdisasm_dir)
            except ToolMissing:
                pass
            env = _tool_env()
        argv = [os.path.realpath(sys.executable), "-I", str(SERVER_SCRIPT), lib_path, self.scratch,
                cuobjdump or "", nvdisasm_dir]
        command = sandboxed(argv, self.scratch, tools, read_only)
        with open(os.path.join(self.scratch, "server.log"), "wb") as errors:
            self.proc = _spawn(lambda: subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                        stderr=errors, cwd=self.scratch, env=env))
        hello = self.receive(60.0)
        if hello is None or not hello.get("hello"):
            try:
                said = Path(self.scratch, "server.log").read_text(errors="replace").strip()[-300:]
            except OSError:
                said = ""
            self.kill()
            raise NvrtcUnavailable((hello or {}).get("error") or f"the NVRTC compile server did not start: {said}")

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.proc.stdin.write(struct.pack(">I", len(body)) + body)
        self.proc.stdin.flush()

    def _read_exactly(self, n: int, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        chunks, left = [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, left)
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def receive(self, timeout_s: float) -> dict | None:
        """The next answer, or None when the server died or did not answer within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        header = self._read_exactly(4, deadline)
        if header is None:
            return None
        body = self._read_exactly(struct.unpack(">I", header)[0], deadline)
        return json.loads(body.decode()) if body is not None else None

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


_SPAWN_QUEUE: "queue.Queue[tuple[Callable, Future]]" = queue.Queue()
_SPAWNER: threading.Thread | None = None


def _spawner_loop() -> None:
    while True:
        start, future = _SPAWN_QUEUE.get()
        try:
            future.set_result(start())
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            future.set_exception(exc)


def _spawn(start: Callable):
    """Run `start` (a Popen) on one long-lived thread: bubblewrap's --die-with-parent kills the
    sandbox when the *thread* that started it ends, and compile checks run on short-lived pool threads."""
    global _SPAWNER
    with _POOL_LOCK:
        if _SPAWNER is None or not _SPAWNER.is_alive():
            _SPAWNER = threading.Thread(target=_spawner_loop, name="kl-nvrtc-spawner", daemon=True)
            _SPAWNER.start()
    future: Future = Future()
    _SPAWN_QUEUE.put((start, future))
    return future.result()


class ServerPool:
    """Up to `size` compile servers, started when first needed, each serving one request at a time."""

    def __init__(self, library: NvrtcLibrary, cuobjdump: str | None, size: int):
        self.library, self.cuobjdump, self.size = library, cuobjdump, max(1, size)
        self._idle: list[_Server] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def _take(self) -> _Server:
        with self._cond:
            while True:
                # A server that died while idle is dropped here, so a retry after a death gets a live or
                # a new one rather than the next dead one.
                while self._idle and self._idle[-1].proc.poll() is not None:
                    self._idle.pop().kill()
                    self._count -= 1
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    break
                self._cond.wait()
            self._count += 1
        try:
            return _Server(self.library, self.cuobjdump)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _give_back(self, server: _Server | None) -> None:
        with self._cond:
            if server is None:
                self._count -= 1
            elif self._closed:
                self._count -= 1
                server.close()
            else:
                self._idle.append(server)
            self._cond.notify()

    def compile(self, source: str, name: str, options: list[str], sass: bool, timeout_s: float) -> ServerAnswer:
        request = {"source": source, "name": name, "options": options, "sass": sass}
        for attempt in range(2):
            server = self._take()
            try:
                server.send(request)
                answer = server.receive(timeout_s)
            except OSError:
                answer = None
            if answer is not None:
                self._give_back(server)
                cubin = base64.b64decode(answer["cubin"]) if answer.get("cubin") else None
                return ServerAnswer(bool(answer["ok"]) and cubin is not None, answer["log"], cubin,
                                    answer.get("sass_dump"), answer.get("sass_error"))
            timed_out = server.proc.poll() is None
            server.kill()
            self._give_back(None)
            if timed_out:
                return ServerAnswer(False, f"{NVRTC_TRANSIENT[0]} within {timeout_s:.0f} s", None, None, None)
            # It died: once more on a fresh server, in case the death was not this source's doing.
        return ServerAnswer(False, f"{NVRTC_TRANSIENT[1]} while compiling this source", None, None, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for server in idle:
            server.close()


_POOL: ServerPool | None = None
_POOL_KEY: tuple = ()
_POOL_LOCK = threading.Lock()


def pool_size() -> int:
    value = os.environ.get("KERNELLAB_NVRTC_SERVERS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else (os.cpu_count() or 2)


def server_pool() -> ServerPool:
    """This process's pool, for the current library, sandbox mode and allowed folders: when one of
    them changes (a setting, a test) the old servers are closed and new ones start; a forked child
    makes its own (the parent's servers are the parent's)."""
    global _POOL, _POOL_KEY
    library, problem = find_nvrtc()
    if library is None:
        raise NvrtcUnavailable(problem)
    from .compile_sandbox import sandbox_status
    from .compiler import ToolMissing, find_tool
    from .directives import allowed_include_dirs
    try:
        cuobjdump = find_tool("cuobjdump")
    except ToolMissing:
        cuobjdump = None
    key = (os.getpid(), library, cuobjdump, sandbox_status().mode, tuple(map(str, allowed_include_dirs())),
           os.environ.get("KERNELLAB_DATA_DIR"), os.environ.get("HOME"), pool_size())
    with _POOL_LOCK:
        if _POOL is None or _POOL_KEY != key:
            if _POOL is not None and _POOL_KEY[0] == os.getpid():
                _POOL.close()
            _POOL, _POOL_KEY = ServerPool(library, cuobjdump, pool_size()), key
        return _POOL


def close_servers() -> None:
    global _POOL
    with _POOL_LOCK:
        if _POOL is not None and _POOL_KEY[0] == os.getpid():
            _POOL.close()
        _POOL = None


atexit.register(close_servers)
