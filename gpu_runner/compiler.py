"""CUDA source -> cubin without a GPU, with diagnostics, ptxas resources and SASS counts.

Two engines, one path: `compile_cubin` compiles a source with NVRTC (in sandboxed compile servers,
gpu_runner/nvrtc.py) when the source needs only what NVRTC offers, else with nvcc; which one is a
pure function of the source (`nvrtc.choose_engine`) and is recorded as the report's `compiler`
("nvrtc 13.0.88" / "nvcc 13.0.88"). The system's nvcc is used when there is one, else the
`nvidia-cuda-nvcc` wheel's; libnvrtc preferably of nvcc's release (`nvrtc.find_nvrtc`). cuobjdump (and the nvdisasm it
needs) come from the toolkit or the `nvidia-cuda-cuobjdump` / `-nvdisasm` wheels.
Results are cached on disk by (source, options, arch, engine and its release) so a family recorded
twice compiles once; SASS counts (`sass=True`) are added to a cached entry the first time they are
asked for, so a compile check without them and the measurement after it share one compile.
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

from .compile_sandbox import sandboxed
from .cutlass_headers import cutlass_include_dir, cutlass_version, uses_cutlass
from .directives import allowed_include_dirs, find_forbidden_directive
from .nvrtc import (NVRTC_TRANSIENT, Engine, NvrtcUnavailable, choose_engine, find_nvrtc, nvrtc_flags, server_pool,
                    toolkit_include_dirs)
from .result import CompileDiagnostic, CompileReport, CompilerFacts

DEFAULT_ARCH = "sm_90"
SOURCE_NAME = "kernel.cu"
# nvcc/NVRTC's front end writes `file(line): error: ...`; the host preprocessor writes `file:line:col: error: ...`.
_DIAGNOSTIC = re.compile(r"^(?:(?P<file>[^\s()]+)\((?P<line>\d+)\)|(?P<gfile>[^\s:]+):(?P<gline>\d+):\d+): "
                         r"(?P<severity>error|warning|catastrophic error|fatal error)(?: #[\w-]+)?: (?P<message>.*)$")
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


def include_flags() -> list[str]:
    """-I for each allowed header folder (CUTLASS/CuTe first), for nvcc and NVRTC alike."""
    return [f"-I{extra}" for extra in allowed_include_dirs()]


def cutlass_flags(source: str) -> list[str]:
    """What CuTe and CUTLASS need beyond C++17: constexpr functions called from device code."""
    return ["--expt-relaxed-constexpr"] if uses_cutlass(source) else []


_QUOTED = re.compile(r'"[^"\n]*"|\'[^\'\n]*\'')
FOREIGN_FILE = "an included header"


_CUPY_SOURCE = re.compile(r"[0-9a-f]{16,}(?:\.cubin)?\.cu")


def _is_submitted(file: str, submitted: str) -> bool:
    # NVRTC calls the source default_program; pycuda writes it as kernel.cu in a temp folder, cupy as
    # kern.cu or as <hash>.cubin.cu when it compiles with nvcc.
    name = os.path.basename(file)
    return name in (submitted, "kern.cu", "kernel.cu", "default_program") or bool(_CUPY_SOURCE.fullmatch(name))


def redact_foreign(log: str, submitted: str = SOURCE_NAME) -> str:
    """The compiler's log with nothing quoted from files other than the submitted one.

    A diagnostic about another file keeps its kind but loses its path, its quoted text and the source
    lines the compiler echoes after it; the submitted file's own diagnostics are left whole.
    """
    out, echoing = [], False
    for line in log.splitlines():
        match = _DIAGNOSTIC.match(line.strip())
        if match:
            echoing = not _is_submitted(match.group("file") or match.group("gfile"), submitted)
            if echoing:
                message = _QUOTED.sub('"…"', match.group("message"))
                out.append(f"{FOREIGN_FILE}: {match.group('severity')}: {message}")
                continue
        elif echoing and (line.startswith((" ", "\t")) or not line.strip() or line.strip() == "^"):
            continue
        elif re.match(r"^\s*(?:In file included from|from) ", line) or "detected during" in line:
            out.append(_QUOTED.sub('"…"', re.sub(r"\S+\(\d+\)", FOREIGN_FILE, line)))
            continue
        else:
            echoing = False
        out.append(line)
    return "\n".join(out)


def parse_diagnostics(log: str, submitted: str = SOURCE_NAME) -> list[CompileDiagnostic]:
    """Errors and warnings from nvcc, NVRTC or ptxas output; line numbers only for the submitted file."""
    diagnostics = []
    for line in log.splitlines():
        match = _DIAGNOSTIC.match(line.strip())
        if match:
            severity = "warning" if match.group("severity") == "warning" else "error"
            if _is_submitted(match.group("file") or match.group("gfile"), submitted):
                line_number = int(match.group("line") or match.group("gline"))
                diagnostics.append(CompileDiagnostic(line_number, match.group("message"), severity))
            else:
                diagnostics.append(CompileDiagnostic(None, f"in {FOREIGN_FILE}: "
                                                     + _QUOTED.sub('"…"', match.group("message")), severity))
            continue
        if line.startswith(FOREIGN_FILE + ": "):
            severity = "warning" if ": warning: " in line else "error"
            diagnostics.append(CompileDiagnostic(None, f"in {FOREIGN_FILE}: " + line.split(": ", 2)[-1], severity))
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


def _flags_and_entry(source: str, options: Sequence[str], arch: str) -> tuple[list[str], Path]:
    """nvcc's flags for a compile and its folder in the cache (keyed by everything that shapes the
    cubin; SASS counts are added to an entry when first asked for, so they are not in the key)."""
    from .candidate import arch_option, nvcc_options

    arch = arch_option(list(options)) or arch
    flags = ["-cubin", f"-arch={arch}", "-O3", "-std=c++17", "-Xptxas", "-v", *nvcc_options(list(options))]
    flags += [flag for flag in cutlass_flags(source) if flag not in flags]
    key = hashlib.sha256(json.dumps([source, flags, include_flags(), nvcc_version(),
                                     cutlass_version()]).encode()).hexdigest()
    return flags, cache_dir() / key[:2] / key


def _nvrtc_flags_and_entry(source: str, options: Sequence[str], arch: str, label: str) -> tuple[list[str], Path]:
    """NVRTC's flags and cache folder; the key holds the engine and its release, not the machine's
    include paths, so a compile carried from another machine with the same release is found."""
    flags = nvrtc_flags(options, arch)
    key = hashlib.sha256(json.dumps(["nvrtc", source, flags, label, cutlass_version()]).encode()).hexdigest()
    return flags, cache_dir() / key[:2] / key


def _engine_entry(source: str, options: Sequence[str], arch: str) -> tuple[Engine, str, list[str], Path]:
    """(engine, the report's compiler string, flags, cache folder) for a compile of `source`."""
    engine = choose_engine(source, options)
    if engine.name == "nvrtc":
        library, _ = find_nvrtc()
        flags, entry = _nvrtc_flags_and_entry(source, options, arch, library.label)
        return engine, library.label, flags, entry
    flags, entry = _flags_and_entry(source, options, arch)
    return engine, f"nvcc {nvcc_version()}", flags, entry


def cached_compile(source: str, options: Sequence[str] = (), arch: str = DEFAULT_ARCH, *,
                   sass: bool = True) -> tuple[dict, bytes] | None:
    """The cache's (report as JSON, cubin) of a successful compile, or None where it holds none (or,
    with `sass`, where its SASS counts were never taken)."""
    _, _, _, cached = _engine_entry(source, options, arch)
    try:
        report = json.loads((cached / "report.json").read_text())
        if sass and not (report.get("facts") or {}).get("sass"):
            return None
        return (report, (cached / "k.cubin").read_bytes()) if report.get("ok") else None
    except (OSError, ValueError):
        return None


def seed_cache(source: str, options: Sequence[str], arch: str, *, report: dict, cubin: bytes) -> bool:
    """Store a compile made on another machine under this machine's key, so compile_cubin finds it.

    Only a successful compile by the engine this machine uses for the source, of the same release,
    with the same CUTLASS headers is taken (the key differs between machines only by where the
    headers lie); anything else returns False and is compiled here when asked for."""
    facts = report.get("facts") or {}
    _, label, _, cached = _engine_entry(source, options, arch)
    if not report.get("ok") or report.get("compiler") != label or facts.get("cutlass") != cutlass_version():
        return False
    cached.mkdir(parents=True, exist_ok=True)
    _atomic_write(cached / "k.cubin", cubin)
    _atomic_write(cached / "report.json", json.dumps(report).encode())
    return True


def compile_cubin(source: str, options: Sequence[str] = (), arch: str = DEFAULT_ARCH, *,
                  sass: bool = True, use_cache: bool = True, timeout_s: float = 180.0) -> CompileOutput:
    """Compile `source` to a cubin for `arch` with the engine the source calls for (NVRTC or nvcc);
    never raises for a bad source."""
    engine, label, flags, cached = _engine_entry(source, options, arch)
    if use_cache and (cached / "report.json").is_file():
        try:
            report = _report_from_json(json.loads((cached / "report.json").read_text()))
            cubin = (cached / "k.cubin").read_bytes() if report.ok else None
        except (OSError, ValueError, KeyError, TypeError):
            pass
        else:
            if sass and cubin is not None and _lacks_sass(report):
                _add_sass_counts(report, cubin)
                try:
                    _atomic_write(cached / "report.json", json.dumps(asdict(report)).encode())
                except OSError:
                    pass
            return CompileOutput(report, cubin)
    started = time.perf_counter()
    refusal = find_forbidden_directive(source)
    if refusal is not None:
        # Refused before any tool reads the source; not cached, so a wider allow-list applies at once.
        return CompileOutput(CompileReport(ok=False, diagnostics=[CompileDiagnostic(refusal.line, refusal.reason)],
                                           log=refusal.reason, facts=None, compile_s=0.0, compiler=label), None)
    sass_dump: str | None = None
    notes = []
    if engine.name == "nvrtc":
        try:
            answer = server_pool().compile(source, SOURCE_NAME,
                                           [*flags, *(f"-I{d}" for d in toolkit_include_dirs())], sass, timeout_s)
        except NvrtcUnavailable as exc:   # a server that cannot start is a missing tool, not a bad source
            raise ToolMissing(f"NVRTC: {exc}") from exc
        log = redact_foreign(answer.log, SOURCE_NAME)
        ok, cubin = answer.ok, answer.cubin
        sass_dump = answer.sass_dump
        if ok and sass and sass_dump is None:
            notes.append(f"{SASS_UNAVAILABLE}{answer.sass_error}]")
    else:
        log, ok, cubin = _run_nvcc(flags, source, timeout_s)
        if not engine.reason.startswith("the source"):
            notes.append(f"[compiled with nvcc: {engine.reason}]")
    elapsed = time.perf_counter() - started
    diagnostics = parse_diagnostics(log)
    if not ok and not any(d.severity == "error" for d in diagnostics):
        tail = log.strip().splitlines()[-1] if log.strip() else f"{engine.name} failed without a message"
        diagnostics.append(CompileDiagnostic(None, tail))
    log = "\n".join([log, *notes]) if notes else log
    facts = parse_ptxas(log) if ok else None
    if facts is not None and cutlass_include_dir() is not None:
        facts.cutlass = cutlass_version()
    if facts is not None and sass and cubin is not None:
        try:
            per_kernel = parse_sass(sass_dump) if sass_dump is not None else \
                sass_counts(cubin) if engine.name == "nvcc" else None
            if per_kernel is not None:
                facts.sass = _summed(per_kernel)
        except (ToolMissing, RuntimeError, subprocess.TimeoutExpired) as exc:
            log += f"\n{SASS_UNAVAILABLE}{exc}]"
    report = CompileReport(ok=ok, diagnostics=diagnostics, log=log, facts=facts, compile_s=elapsed, compiler=label)
    # A compiler that crashed or ran out of time says nothing lasting about the source: not cached.
    transient = not ok and engine.name == "nvrtc" and answer.log.startswith(NVRTC_TRANSIENT)
    if use_cache and (ok or diagnostics) and not transient:
        try:
            cached.mkdir(parents=True, exist_ok=True)
            if cubin is not None:
                _atomic_write(cached / "k.cubin", cubin)
            _atomic_write(cached / "report.json", json.dumps(asdict(report)).encode())
        except OSError:
            pass
    return CompileOutput(report, cubin)


def _run_nvcc(flags: list[str], source: str, timeout_s: float) -> tuple[str, bool, bytes | None]:
    """nvcc in the compile sandbox: (log with other files' text redacted, ok, cubin)."""
    with tempfile.TemporaryDirectory(prefix="kl-nvcc-") as tmp:
        src = os.path.join(tmp, SOURCE_NAME)
        Path(src).write_text(source)
        out_path = os.path.join(tmp, "k.cubin")
        argv = [find_tool("nvcc"), *flags, *include_flags(), "-o", out_path, src]
        try:
            proc = subprocess.run(sandboxed(argv, tmp), capture_output=True, text=True, timeout=timeout_s, cwd=tmp,
                                  env=_tool_env())
            log = redact_foreign((proc.stdout + proc.stderr).replace(tmp + os.sep, ""), SOURCE_NAME)
            ok = proc.returncode == 0 and os.path.isfile(out_path)
        except subprocess.TimeoutExpired:
            log, ok = f"nvcc did not finish within {timeout_s:.0f} s", False
        return log, ok, (Path(out_path).read_bytes() if ok else None)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


SASS_UNAVAILABLE = "[sass counts unavailable: "


def _summed(per_kernel: dict[str, dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in per_kernel.values():
        for opcode, n in counts.items():
            total[opcode] = total.get(opcode, 0) + n
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def _lacks_sass(report: CompileReport) -> bool:
    """A successful compile whose SASS counts were never asked for (not one where they failed)."""
    return report.ok and report.facts is not None and not report.facts.sass and SASS_UNAVAILABLE not in report.log


def _add_sass_counts(report: CompileReport, cubin: bytes) -> None:
    """Count the cubin's SASS opcodes into `report` (cuobjdump on the compiled cubin, whichever
    engine made it: about 0.45 s of CPU, which is why a compile check goes without them and a
    measured kernel's counts are taken while the GPU times it)."""
    try:
        report.facts.sass = _summed(sass_counts(cubin))
    except (ToolMissing, RuntimeError, subprocess.TimeoutExpired) as exc:
        report.log += f"\n{SASS_UNAVAILABLE}{exc}]"


def _report_from_json(data: dict) -> CompileReport:
    facts = data.get("facts")
    return CompileReport(ok=data["ok"],
                         diagnostics=[CompileDiagnostic(**d) for d in data["diagnostics"]],
                         log=data["log"], facts=CompilerFacts(**facts) if facts else None,
                         compile_s=data["compile_s"], compiler=data.get("compiler", "nvcc"))
