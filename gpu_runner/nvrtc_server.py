"""A compile server: NVRTC loaded once, compiling one source at a time, for `gpu_runner.nvrtc`.

It runs as a script (`python -I nvrtc_server.py LIBNVRTC SCRATCH [CUOBJDUMP [NVDISASM_DIR]]`) inside the compile
sandbox, so it imports nothing but the standard library: the sandbox binds this one file, libnvrtc's
folder and the toolkit's headers, not the project. NVRTC reads the files a source includes, which is
why it does not run in the parent process.

Protocol, over stdin/stdout: each message is a 4-byte big-endian length followed by that many bytes
of UTF-8 JSON. After start-up the server writes {"hello": true, "version": [major, minor]} (or
{"hello": false, "error": ...}); then, per request {"source", "name", "options", "sass"}, it answers
{"ok", "log", "cubin" (base64 or null), "sass_dump", "sass_error", "compile_s", "sass_s"}.
"""
from __future__ import annotations

import base64
import ctypes
import glob
import json
import os
import struct
import subprocess
import sys
import time

NVRTC_SUCCESS = 0


def load_nvrtc(path: str) -> ctypes.CDLL:
    """libnvrtc, with its builtins library loaded first from the same folder (the wheel's libnvrtc
    does not find libnvrtc-builtins by itself when that folder is not on the loader's path)."""
    folder = os.path.dirname(path)
    if folder:
        for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so*"))):
            if ".alt." not in builtins:
                ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
                break
    lib = ctypes.CDLL(path)
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_char_p,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    for name in ("nvrtcGetProgramLogSize", "nvrtcGetCUBINSize"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    for name in ("nvrtcGetProgramLog", "nvrtcGetCUBIN"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_version(lib: ctypes.CDLL) -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_program(lib: ctypes.CDLL, source: str, name: str, options: list[str]) -> tuple[bool, str, bytes | None]:
    """(ok, NVRTC's log, cubin) for one source; the options must ask for a real architecture (sm_XX)."""
    prog = ctypes.c_void_p()
    result = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if result != NVRTC_SUCCESS:
        return False, f"nvrtc: {lib.nvrtcGetErrorString(result).decode()}", None
    try:
        encoded = [o.encode() for o in options]
        result = lib.nvrtcCompileProgram(prog, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buffer = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buffer)
        log = buffer.value.decode(errors="replace")
        if result != NVRTC_SUCCESS:
            return False, log or f"nvrtc: {lib.nvrtcGetErrorString(result).decode()}", None
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        if size.value == 0:
            return False, log + "\nnvrtc: no CUBIN was produced (was a virtual architecture asked for?)", None
        buffer = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, buffer)
        return True, log, buffer.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def dump_sass(cuobjdump: str, cubin: bytes, scratch: str, nvdisasm_dir: str = "") -> str:
    path = os.path.join(scratch, "k.cubin")
    with open(path, "wb") as handle:
        handle.write(cubin)
    env = dict(os.environ)
    # cuobjdump runs nvdisasm, which it looks for on PATH.
    env["PATH"] = os.pathsep.join([d for d in (nvdisasm_dir, os.path.dirname(cuobjdump)) if d] + [env.get("PATH", "")])
    out = subprocess.run([cuobjdump, "--dump-sass", path], capture_output=True, text=True, timeout=120, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {out.stderr.strip()[-300:]}")
    return out.stdout


def read_frame(stream) -> dict | None:
    header = stream.read(4)
    if len(header) < 4:
        return None
    (length,) = struct.unpack(">I", header)
    body = stream.read(length)
    if len(body) < length:
        return None
    return json.loads(body.decode())


def write_frame(stream, message: dict) -> None:
    body = json.dumps(message).encode()
    stream.write(struct.pack(">I", len(body)) + body)
    stream.flush()


def serve(lib_path: str, scratch: str, cuobjdump: str | None, nvdisasm_dir: str = "") -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Anything NVRTC or a library prints must not corrupt the frames: fd 1 becomes stderr's.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    del stdout
    try:
        lib = load_nvrtc(lib_path)
        write_frame(out, {"hello": True, "version": list(nvrtc_version(lib))})
    except OSError as exc:
        write_frame(out, {"hello": False, "error": f"libnvrtc could not be loaded from {lib_path}: {exc}"})
        return 1
    while True:
        request = read_frame(stdin)
        if request is None:
            return 0
        started = time.perf_counter()
        ok, log, cubin = compile_program(lib, request["source"], request.get("name", "kernel.cu"),
                                         list(request.get("options", [])))
        compile_s = time.perf_counter() - started
        sass_dump = sass_error = None
        sass_started = time.perf_counter()
        if ok and request.get("sass"):
            if cuobjdump:
                try:
                    sass_dump = dump_sass(cuobjdump, cubin, scratch, nvdisasm_dir)
                except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
                    sass_error = str(exc)
            else:
                sass_error = "cuobjdump was not found"
        write_frame(out, {"ok": ok, "log": log, "cubin": base64.b64encode(cubin).decode() if cubin else None,
                          "sass_dump": sass_dump, "sass_error": sass_error, "compile_s": compile_s,
                          "sass_s": time.perf_counter() - sass_started})


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None,
                   sys.argv[4] if len(sys.argv) > 4 else ""))
