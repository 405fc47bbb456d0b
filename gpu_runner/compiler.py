"""nvcc without a GPU: CUDA source -> cubin, with diagnostics, ptxas resources and SASS counts.

The system's nvcc is used when there is one, else the `nvidia-cuda-nvcc` wheel's. cuobjdump (and the
nvdisasm it needs) come from the toolkit or the `nvidia-cuda-cuobjdump` / `-nvdisasm` wheels.
Results are cached on disk by (source, options, arch, nvcc) so a family recorded twice compiles once.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .result import CompileDiagnostic, CompileReport, CompilerFacts

DEFAULT_ARCH = "sm_90"
SOURCE_NAME = "kernel.cu"
_DIAGNOSTIC = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<severity>error|warning|catastrophic error)"
                         r"(?: #[\w-]+)?: (?P<message>.*)$")
_PTXAS_ERROR = re.compile(r"^ptxas (?:error|fatal)\s*: (?P<message>.*)$")
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?(?P<opcode>[A-Z][A-Z0-9_.]*)")


class ToolMissing(RuntimeError):
    """A CUDA command-line tool could not be found."""


def _wheel_bins() -> list[str]:
    dirs = []
    for base in sys.path:
        dirs.extend(sorted(glob.glob(os.path.join(base, "nvidia", "cu1*", "bin"))))
        dirs.extend(sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvcc", "bin"))))
    return [d for d in dirs if os.path.isdir(d)]


@lru_cache(maxsize=None)
def find_tool(name: str) -> str:
    """Path of nvcc, cuobjdump, nvdisasm or ncu: $KERNELLAB_<NAME>, PATH, CUDA_HOME, then the wheels."""
    override = os.environ.get(f"KERNELLAB_{name.upper()}")
    if override:
        return override
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isfile(os.path.join(home, "bin", name)):
            return os.path.join(home, "bin", name)
    for directory in _wheel_bins():
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    if name == "ncu":
        found = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
        if found:
            return found[-1]
    raise ToolMissing(f"{name} was not found (install the CUDA toolkit or the nvidia-cuda-{name} wheel)")


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    extra = [d for d in _wheel_bins()]
    try:
        extra.insert(0, os.path.dirname(find_tool("nvdisasm")))
    except ToolMissing:
        pass
    env["PATH"] = os.pathsep.join(extra + [env.get("PATH", "")])
    return env


@lru_cache(maxsize=None)
def nvcc_version() -> str:
    out = subprocess.run([find_tool("nvcc"), "--version"], capture_output=True, text=True, timeout=60)
    match = re.search(r"release ([\d.]+), V([\d.]+)", out.stdout)
    return match.group(2) if match else out.stdout.strip().splitlines()[-1]


def parse_diagnostics(log: str) -> list[CompileDiagnostic]:
    """Errors and warnings with line numbers from nvcc, NVRTC or ptxas output."""
    diagnostics = []
    for line in log.splitlines():
        match = _DIAGNOSTIC.match(line.strip())
        if match:
            severity = "warning" if match.group("severity") == "warning" else "error"
            diagnostics.append(CompileDiagnostic(int(match.group("line")), match.group("message"), severity))
            continue
        match = _PTXAS_ERROR.match(line.strip())
        if match:
            diagnostics.append(CompileDiagnostic(None, "ptxas: " + match.group("message")))
    return diagnostics


def parse_ptxas(log: str) -> CompilerFacts:
    """Registers, shared memory, spills and stack per entry function from `-Xptxas -v` output."""
    kernels: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in log.splitlines():
        match = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if match:
            current = match.group(1)
            kernels.setdefault(current, {})
            continue
        if current is None:
            continue
        match = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if match:
            kernels[current].update(stack_bytes=int(match.group(1)), spill_stores=int(match.group(2)),
                                    spill_loads=int(match.group(3)))
        match = re.search(r"Used (\d+) registers", line)
        if match:
            kernels[current]["registers"] = int(match.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            kernels[current]["shared_bytes"] = int(smem.group(1)) if smem else 0
    kernels = {k: v for k, v in kernels.items() if "registers" in v}
    facts = CompilerFacts(kernels=kernels)
    if kernels:
        values = list(kernels.values())
        facts.registers = max(v.get("registers", 0) for v in values)
        facts.shared_bytes = max(v.get("shared_bytes", 0) for v in values)
        facts.spill_stores = sum(v.get("spill_stores", 0) for v in values)
        facts.spill_loads = sum(v.get("spill_loads", 0) for v in values)
        facts.stack_bytes = max(v.get("stack_bytes", 0) for v in values)
    return facts


def parse_sass(dump: str) -> dict[str, dict[str, int]]:
    """{kernel: {opcode with modifiers: count}} from `cuobjdump --dump-sass`."""
    counts: dict[str, dict[str, int]] = {}
    current = None
    for line in dump.splitlines():
        match = re.match(r"^\s*Function : (\S+)", line)
        if match:
            current = counts.setdefault(match.group(1), {})
            continue
        if current is None:
            continue
        match = _SASS_LINE.match(line)
        if match:
            opcode = match.group("opcode")
            current[opcode] = current.get(opcode, 0) + 1
    return counts


def sass_counts(cubin: bytes) -> dict[str, dict[str, int]]:
    with tempfile.TemporaryDirectory(prefix="kl-sass-") as tmp:
        path = os.path.join(tmp, "k.cubin")
        Path(path).write_bytes(cubin)
        out = subprocess.run([find_tool("cuobjdump"), "--dump-sass", path], capture_output=True,
                             text=True, timeout=120, env=_tool_env())
    if out.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {out.stderr.strip()[-300:]}")
    return parse_sass(out.stdout)


def cubin_kernel_names(cubin: bytes) -> set[str]:
    """Entry-function names in a cubin (read from its ELF symbol names, no tool needed)."""
    names = set()
    for match in re.finditer(rb"\.text\.([A-Za-z_$][\w$]*)\x00", cubin):
        names.add(match.group(1).decode())
    return names


@dataclass
class CompileOutput:
    report: CompileReport
    cubin: bytes | None


def cache_dir() -> Path:
    path = Path(os.environ.get("KERNELLAB_CACHE", Path.home() / ".cache" / "kernellab" / "gpu_runner"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_cubin(source: str, options: Sequence[str] = (), arch: str = DEFAULT_ARCH, *,
                  sass: bool = True, use_cache: bool = True, timeout_s: float = 180.0) -> CompileOutput:
    """Compile `source` to a cubin for `arch` with nvcc; never raises for a bad source."""
    from .candidate import nvcc_options

    flags = ["-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v", *nvcc_options(list(options))]
    key = hashlib.sha256(json.dumps([source, flags, nvcc_version(), sass]).encode()).hexdigest()
    cached = cache_dir() / key[:2] / key
    if use_cache and (cached / "report.json").is_file():
        try:
            report = _report_from_json(json.loads((cached / "report.json").read_text()))
            cubin = (cached / "k.cubin").read_bytes() if report.ok else None
            return CompileOutput(report, cubin)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kl-nvcc-") as tmp:
        src = os.path.join(tmp, SOURCE_NAME)
        Path(src).write_text(source)
        out_path = os.path.join(tmp, "k.cubin")
        try:
            proc = subprocess.run([find_tool("nvcc"), *flags, "-o", out_path, src], capture_output=True,
                                  text=True, timeout=timeout_s, cwd=tmp, env=_tool_env())
            log = (proc.stdout + proc.stderr).replace(tmp + os.sep, "")
            ok = proc.returncode == 0 and os.path.isfile(out_path)
        except subprocess.TimeoutExpired:
            log, ok = f"nvcc did not finish within {timeout_s:.0f} s", False
        cubin = Path(out_path).read_bytes() if ok else None
    elapsed = time.perf_counter() - started
    diagnostics = parse_diagnostics(log)
    if not ok and not any(d.severity == "error" for d in diagnostics):
        tail = log.strip().splitlines()[-1] if log.strip() else "nvcc failed without a message"
        diagnostics.append(CompileDiagnostic(None, tail))
    facts = parse_ptxas(log) if ok else None
    if facts is not None and sass and cubin is not None:
        try:
            per_kernel = sass_counts(cubin)
            total: dict[str, int] = {}
            for counts in per_kernel.values():
                for opcode, n in counts.items():
                    total[opcode] = total.get(opcode, 0) + n
            facts.sass = dict(sorted(total.items(), key=lambda kv: -kv[1]))
        except (ToolMissing, RuntimeError, subprocess.TimeoutExpired) as exc:
            log += f"\n[sass counts unavailable: {exc}]"
    report = CompileReport(ok=ok, diagnostics=diagnostics, log=log, facts=facts, compile_s=elapsed,
                           compiler=f"nvcc {nvcc_version()}")
    if use_cache and (ok or diagnostics):
        try:
            cached.mkdir(parents=True, exist_ok=True)
            if cubin is not None:
                _atomic_write(cached / "k.cubin", cubin)
            _atomic_write(cached / "report.json", json.dumps(asdict(report)).encode())
        except OSError:
            pass
    return CompileOutput(report, cubin)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _report_from_json(data: dict) -> CompileReport:
    facts = data.get("facts")
    return CompileReport(ok=data["ok"],
                         diagnostics=[CompileDiagnostic(**d) for d in data["diagnostics"]],
                         log=data["log"], facts=CompilerFacts(**facts) if facts else None,
                         compile_s=data["compile_s"], compiler=data.get("compiler", "nvcc"))
