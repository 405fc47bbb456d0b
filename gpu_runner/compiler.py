"""CUDA source -> cubin without a GPU, with diagnostics, ptxas resources and SASS counts.

Two engines, one path: `compile_cubin` compiles a source with NVRTC (in sandboxed compile servers,
gpu_runner/nvrtc.py) when the source needs only what NVRTC offers, else with nvcc; which one is a
pure function of the source and its options (`nvrtc.choose_engine`) and is recorded as the report's `compiler`
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
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .compile_sandbox import sandboxed
from .cutlass_headers import cutlass_include_dir, cutlass_version, uses_cutlass
from .directives import allowed_include_dirs, find_forbidden_directive, included_headers
from .nvrtc import (NVRTC_TRANSIENT, Engine, NvrtcUnavailable, choose_engine, find_nvrtc, nvrtc_flags, server_pool,
                    toolkit_include_dirs)
from .result import CompileDiagnostic, CompileReport, CompilerFacts

DEFAULT_ARCH = "sm_90"
SOURCE_NAME = "kernel.cu"
# nvcc/NVRTC's front end writes `file(line): error: ...`; the host preprocessor writes `file:line:col: error: ...`.
# Notes and remarks belong to the error or warning above them (parse_diagnostics lists only those).
_DIAGNOSTIC = re.compile(r"^(?:(?P<file>[^\s()]+)\((?P<line>\d+)\)|(?P<gfile>[^\s:]+):(?P<gline>\d+):\d+): "
                         r"(?P<severity>error|warning|catastrophic error|fatal error|note|remark)(?: #[\w-]+)?: "
                         r"(?P<message>.*)$")
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
    # The headers as the preprocessor reads the directives too: `#include /* CuTe */ <cute/tensor.hpp>`
    # is a CuTe source that uses_cutlass's one-line pattern does not see.
    uses = uses_cutlass(source) or any(header.split("/", 1)[0] in ("cute", "cutlass")
                                       for header in included_headers(source))
    return ["--expt-relaxed-constexpr"] if uses else []


_QUOTED = re.compile(r'"[^"\n]*"|\'[^\'\n]*\'')
FOREIGN_FILE = "an included header"


_CUPY_SOURCE = re.compile(r"[0-9a-f]{16,}(?:\.cubin)?\.cu")
# A diagnostic already redacted by `redact_foreign`: "an included header: error: ..." (a file that is
# not a header KernelLab serves) or "<cute/algorithm/gemm.hpp>(218): error: ..." (one that is).
_REDACTED = re.compile(rf"^{FOREIGN_FILE}: (?P<severity>error|warning|catastrophic error|fatal error|note|remark)"
                       r"(?: #[\w-]+)?: (?P<message>.*)$")
_CARET = re.compile(r"^\s*\^\s*$")
_GCC_ECHO = re.compile(r"^\s*\d*\s*\|")
_INCLUDE_CONTEXT = re.compile(r"^\s*(?:In file included from|from) ")
_CONTEXT_AT = re.compile(r" at line (?P<line>\d+)(?: of (?P<file>\S+?))?:?\s*$")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.<>)\]])/[\w.+-]+(?:/[\w.+-]+)+")
# ptxas: `ptxas <file>, line N; error   : ...` (the PTX it was given: NVRTC's "application ptx input",
# nvcc's tmpxft_..._kernel.ptx) and the file-less `ptxas error|fatal : ...`.
_PTXAS_LOCATED = re.compile(r"^ptxas (?P<file>.+?), line (?P<line>\d+); (?P<severity>error|warning)\s*: "
                            r"(?P<message>.*)$")
_PTXAS_ABORTED = "Ptx assembly aborted due to errors"
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _is_submitted(file: str, submitted: str) -> bool:
    # NVRTC calls the source default_program; pycuda writes it as kernel.cu in a temp folder, cupy as
    # kern.cu or as <hash>.cubin.cu when it compiles with nvcc.
    name = os.path.basename(file)
    return name in (submitted, "kern.cu", "kernel.cu", "default_program") or bool(_CUPY_SOURCE.fullmatch(name))


def _header_roots() -> list[str]:
    """The folders of the headers KernelLab serves (the toolkit's, CUTLASS/CuTe, KERNELLAB_INCLUDE_DIR),
    longest first, as written and resolved: a diagnostic in a file under one is shown with the
    header's name (`cute/algorithm/gemm.hpp`) and whole; one in any other file is hidden."""
    from .directives import allowed_include_dirs
    from .nvrtc import toolkit_include_dirs

    roots: list[str] = []
    try:
        roots += list(toolkit_include_dirs())
    except Exception:  # noqa: BLE001 - no nvcc here (a GPU worker compiling with cupy): its headers are not shown
        pass
    try:
        roots += [str(d) for d in allowed_include_dirs()]
    except Exception:  # noqa: BLE001
        pass
    expanded = {os.path.normpath(r) for r in roots} | {os.path.realpath(r) for r in roots}
    return sorted(expanded, key=len, reverse=True)


def _header_name(file: str, roots: list[str]) -> str | None:
    """`file`'s name relative to the header folder it is in, or None when it is in none of them."""
    if file.startswith("<") and file.endswith(">"):
        return file[1:-1]   # already redacted
    if not os.path.isabs(file):
        return None
    for path in dict.fromkeys((os.path.normpath(file), os.path.realpath(file))):
        for root in roots:
            if path.startswith(root.rstrip(os.sep) + os.sep):
                return path[len(root.rstrip(os.sep)) + 1:]
    return None


class _Roots:
    """The header folders, looked up once per log and only when a log names another file."""

    def __init__(self) -> None:
        self._roots: list[str] | None = None

    def name(self, file: str) -> str | None:
        if file.startswith("<") and file.endswith(">"):
            return file[1:-1]
        if self._roots is None:
            self._roots = _header_roots()
        return _header_name(file, self._roots)


@dataclass
class _Block:
    """One diagnostic of the compiler's log with what the compiler wrote under it."""
    head: str                 # the line as written
    file: str | None          # None: already redacted to FOREIGN_FILE
    line: int | None
    severity: str
    message: str
    kind: str                 # "submitted", "header" (a header KernelLab serves), "foreign" (any other file)
    header: str | None = None
    more: list[str] = field(default_factory=list)      # the message's continuation ("operand types are: ...")
    echo: list[str] = field(default_factory=list)      # the echoed source line and its caret
    context: list[str] = field(default_factory=list)   # "detected during: instantiation of ... at line N of kernel.cu"
    notes: list["_Block"] = field(default_factory=list)

    def user_line(self, submitted: str) -> int | None:
        """The innermost line of the submitted file the context names (where the user's code
        instantiated the template the diagnostic is in)."""
        for text in self.context:
            match = _CONTEXT_AT.search(text)
            if match and match.group("file") and _is_submitted(match.group("file"), submitted):
                return int(match.group("line"))
        return None


def _blocks(log: str, submitted: str, roots: _Roots) -> list["_Block | str"]:
    """The log cut into diagnostics (each with its continuation lines, echoed source, notes and
    instantiation context) and the plain lines between them."""
    items: list[_Block | str] = []
    current: _Block | None = None   # the error or warning whose lines follow
    last: _Block | None = None      # it or its latest note
    pending: list[str] = []         # indented lines: the message's continuation, or the echo before a caret
    in_context = False

    def flush() -> None:
        if last is not None:
            last.more.extend(pending)
        pending.clear()

    for raw in log.splitlines():
        stripped = raw.strip()
        block = None
        match = _DIAGNOSTIC.match(stripped)
        if match:
            file = match.group("file") or match.group("gfile")
            line = int(match.group("line") or match.group("gline"))
            if _is_submitted(file, submitted):
                block = _Block(raw, file, line, match.group("severity"), match.group("message"), "submitted")
            else:
                header = roots.name(file)
                block = _Block(raw, file, line, match.group("severity"), match.group("message"),
                               "header" if header else "foreign", header)
        else:
            match = _REDACTED.match(stripped)
            if match:
                block = _Block(raw, None, None, match.group("severity"), match.group("message"), "foreign")
        if block is not None:
            flush()
            in_context = False
            if block.severity in ("note", "remark") and current is not None:
                current.notes.append(block)
            else:
                items.append(block)
                current = block
            last = block
            continue
        if current is not None:
            if not stripped or _INCLUDE_CONTEXT.match(raw):
                flush()
                current = last = None
                in_context = False
                items.append(raw)
                continue
            if _CARET.match(raw) and pending:
                echoed = pending.pop()
                flush()
                last.echo += [echoed, raw]
                continue
            if _GCC_ECHO.match(raw):
                flush()
                last.echo.append(raw)
                continue
            if "detected during" in stripped or (in_context and raw.startswith((" ", "\t"))):
                flush()
                in_context = True
                current.context.append(raw)
                continue
            if raw.startswith((" ", "\t")):
                pending.append(raw)
                continue
            flush()
            current = last = None
            in_context = False
        items.append(raw)
    flush()
    return items


def _redact_paths(text: str, submitted: str, roots: _Roots) -> str:
    """`text` with each absolute path replaced: by the header's name in <> for a header KernelLab
    serves, by the submitted file's name, else by FOREIGN_FILE."""
    def name(match: re.Match) -> str:
        path = match.group(0)
        if _is_submitted(path, submitted):
            return os.path.basename(path)
        header = roots.name(path)
        return f"<{header}>" if header else FOREIGN_FILE
    return _ABSOLUTE_PATH.sub(name, text)


def _redacted_context(line: str, submitted: str, roots: _Roots, hide_quotes: bool) -> str:
    line = _redact_paths(line, submitted, roots)
    return _QUOTED.sub('"…"', line) if hide_quotes else line


def _render(block: _Block, submitted: str, roots: _Roots) -> list[str]:
    if block.kind == "submitted":
        out = [block.head, *block.more, *block.echo]
    elif block.kind == "header":
        head = f"<{block.header}>({block.line}): {block.severity}: {block.message}"
        out = [_redact_paths(text, submitted, roots) for text in (head, *block.more, *block.echo)]
    else:
        # Nothing quoted from a file KernelLab does not serve: its kind and its message without quotes.
        out = [f"{FOREIGN_FILE}: {block.severity}: {_QUOTED.sub(chr(34) + '…' + chr(34), block.message)}"]
    for note in block.notes:
        if note.kind != "foreign":
            out += _render(note, submitted, roots)
    hide = block.kind == "foreign"
    out += [_redacted_context(text, submitted, roots, hide) for text in block.context]
    return out


def redact_foreign(log: str, submitted: str = SOURCE_NAME) -> str:
    """The compiler's log with no host path and nothing quoted from files KernelLab does not serve.

    The submitted file's diagnostics are left whole. One in a header KernelLab serves (the toolkit's,
    CUTLASS/CuTe, KERNELLAB_INCLUDE_DIR) is kept whole too, its path cut to the header's name
    (`<cute/algorithm/gemm.hpp>(218): error: ...`). One in any other file keeps only its kind and its
    message without quoted text (`an included header: error: identifier "…" is undefined`). The
    instantiation context under a diagnostic ("detected during ... at line 28 of kernel.cu") is kept
    with its paths cut the same way, so the submitted file's line that led to it is not lost.
    """
    roots = _Roots()
    out: list[str] = []
    for item in _blocks(log, submitted, roots):
        if isinstance(item, _Block):
            out += _render(item, submitted, roots)
        elif _INCLUDE_CONTEXT.match(item) or "detected during" in item:
            out.append(_QUOTED.sub('"…"', _redact_paths(re.sub(r"\S+\(\d+\)", FOREIGN_FILE, item), submitted, roots)))
        else:
            out.append(item)
    return "\n".join(out)


def _ptx_source_line(message: str, source: str | None) -> int | None:
    """The one line of `source` whose inline PTX (a string literal) holds what ptxas's message quotes
    first (the instruction or symbol), or None when no line or several do."""
    quoted = re.findall(r"'([^']+)'", message)
    if not source or not quoted:
        return None
    token = quoted[0].lstrip("%")
    if not token:
        return None
    pattern = re.compile(rf"(?<![\w.]){'%*' if quoted[0].startswith('%') else ''}{re.escape(token)}(?![\w])")
    lines = {number for number, text in enumerate(source.splitlines(), 1)
             if any(pattern.search(literal) for literal in _STRING_LITERAL.findall(text))}
    return lines.pop() if len(lines) == 1 else None


def _ptxas_hint(message: str) -> str:
    match = re.search(r"not supported on \.target '(sm_\d+)'", message)
    if match:
        return (f"; an architecture-specific instruction (wgmma, setmaxnreg, TMA multicast) needs "
                f"compile_options = [\"-arch={match.group(1)}a\"]")
    return ""


def _with_hint(message: str) -> str:
    if "requires --extended-lambda" in message:
        return message + ' (add "--extended-lambda" to compile_options)'
    return message


def parse_diagnostics(log: str, submitted: str = SOURCE_NAME, source: str | None = None) -> list[CompileDiagnostic]:
    """Errors and warnings from nvcc, NVRTC or ptxas output (raw or redacted by `redact_foreign`).

    Line numbers are the submitted file's: its own diagnostics' lines; for one inside a header, the
    innermost line of the submitted file its instantiation context names ("instantiated from this
    line"); for a ptxas error (about the PTX generated from the source, whose lines are not the
    source's), the one line of `source` whose inline PTX holds the instruction or symbol it quotes.
    Identical diagnostics are given once, with how many times the compiler reported them.
    """
    roots = _Roots()
    found: list[tuple[CompileDiagnostic, str | None]] = []   # with a detail shown on the first of its kind
    aborted = None
    for item in _blocks(log, submitted, roots):
        if isinstance(item, _Block):
            if item.severity in ("note", "remark"):
                continue
            severity = "warning" if item.severity == "warning" else "error"
            more = [text.strip() for text in item.more if text.strip()]
            if item.kind == "submitted":
                message = item.message + (f" ({'; '.join(more)})" if more else "")
                found.append((CompileDiagnostic(item.line, _with_hint(message), severity), None))
                continue
            line = item.user_line(submitted)
            where = " (instantiated from this line)" if line is not None else ""
            if item.kind == "header":
                message = _redact_paths(item.message + (f" ({'; '.join(more)})" if more else ""), submitted, roots)
                # "static assertion failed" says which only in the echoed line of the header
                detail = item.echo[0].strip()[:300] if item.echo and item.message.startswith("static assertion") \
                    else None
                found.append((CompileDiagnostic(line, f"in {FOREIGN_FILE} <{item.header}>{where}: {message}",
                                                severity), detail))
            else:
                found.append((CompileDiagnostic(line, f"in {FOREIGN_FILE}{where}: "
                                                + _QUOTED.sub('"…"', item.message), severity), None))
            continue
        stripped = item.strip()
        match = _PTXAS_LOCATED.match(stripped)
        if match and match.group("severity") == "error":
            message = match.group("message").strip()
            found.append((CompileDiagnostic(
                _ptx_source_line(message, source),
                f"ptxas: {message} (line {match.group('line')} of the PTX generated from the source)"
                + _ptxas_hint(message)), None))
            continue
        match = _PTXAS_ERROR.match(stripped)
        if match:
            if match.group("message").strip() == _PTXAS_ABORTED:
                aborted = CompileDiagnostic(None, "ptxas: " + match.group("message"))
            else:
                found.append((CompileDiagnostic(None, "ptxas: " + match.group("message")), None))
    if aborted is not None and not any(d.message.startswith("ptxas: ") for d, _ in found):
        found.append((aborted, None))
    return _collapsed(found)


def _collapsed(found: list[tuple[CompileDiagnostic, str | None]]) -> list[CompileDiagnostic]:
    """Identical diagnostics (same line, message and severity) as one, with their count and the
    first one's detail."""
    groups: dict[tuple, list[str | None]] = {}
    for d, detail in found:
        groups.setdefault((d.line, d.message, d.severity), []).append(detail)
    out = []
    for (line, message, severity), details in groups.items():
        first = next((detail for detail in details if detail), None)
        if len(details) > 1:
            message += f" (reported {len(details)} times" + (f"; the first: {first}" if first else "") + ")"
        elif first:
            message += f": {first}"
        out.append(CompileDiagnostic(line, message, severity))
    return out


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
        cubin = (cached / "k.cubin").read_bytes() if report.get("ok") else None
    except (OSError, ValueError):
        return None
    if cubin is None or cute_fallback(cubin, _target_arch(options, arch)) is not None:
        return None
    return report, cubin


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


# CuTe compiles an instruction the target lacks into CUTE_INVALID_CONTROL_PATH("Attempting to use
# wgmma.fence without CUTE_ARCH_MMA_SM90A_ENABLED"): a printf and a trap at run time (BPT.TRAP in the
# SASS), and no error from the compiler, so the kernel "compiles" with registers and shared memory that
# are not the real kernel's. The message stays in the cubin (printf's format, assert's text).
_CUTE_FALLBACK = re.compile(rb"(?:(?:Attempting|Trying) to use|Using) (?P<feature>[^\x00\n\"]{1,200}?) without "
                            rb"(?P<macro>CUTE_ARCH_[A-Z0-9_]+)|(?P<bare>CUTE_ARCH_[A-Z0-9_]+) is not defined")


def _target_arch(options: Sequence[str], arch: str) -> str:
    """The architecture a compile is for: the candidate's -arch=sm_NNa, else `arch`."""
    from .candidate import arch_option

    return arch_option(list(options)) or arch


def cute_fallbacks(cubin: bytes) -> dict[str, list[str]]:
    """{CuTe macro: the features compiled as a run-time error for want of it}, in the cubin's order;
    {} for a cubin without any."""
    found: dict[str, list[str]] = {}
    if b"CUTE_ARCH_" not in cubin:
        return found
    for match in _CUTE_FALLBACK.finditer(cubin):
        macro = (match.group("macro") or match.group("bare")).decode()
        features = found.setdefault(macro, [])
        feature = match.group("feature")
        if feature is not None and feature.decode(errors="replace") not in features:
            features.append(feature.decode(errors="replace"))
    return found


def _listed(items: list[str], most: int = 4) -> str:
    shown = items[:most]
    if len(items) > most:
        return ", ".join(shown) + f" and {len(items) - most} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def cute_fallback(cubin: bytes, arch: str) -> str | None:
    """The sentence that a cubin compiled for `arch` holds CuTe's run-time-error stand-ins for
    instructions (one sentence per CuTe macro that was missing), or None."""
    sentences = []
    for macro, features in cute_fallbacks(cubin).items():
        what = _listed(features) if features else "code that needs it"
        sentence = (f"CuTe compiled {what} as a run-time error (a printf and a trap) because {macro} is not "
                    f"defined when compiling for {arch}")
        plain = re.fullmatch(r"sm_(\d+)", arch)
        if plain and re.search(rf"_SM{plain.group(1)}(?![0-9])", macro):
            # CuTe's SM90 features that sm_90 lacks (wgmma, TMA descriptors changed on the device) are
            # those of the architecture-specific target: __CUDA_ARCH_FEAT_SM90_ALL, set by -arch=sm_90a.
            sentence += f"; the architecture-specific target defines it: add \"-arch={arch}a\" to compile_options."
        else:
            sentence += (" (CuTe defines it only for the targets in <cute/arch/config.hpp>), so this kernel "
                         f"cannot use it on {arch}.")
        sentences.append(sentence)
    return " ".join(sentences) or None


def _fallback_report(report: CompileReport, fallback: str) -> CompileReport:
    return CompileReport(ok=False, diagnostics=[*report.diagnostics, CompileDiagnostic(None, fallback)],
                         log=f"{report.log.rstrip()}\n{fallback}", facts=None, compile_s=report.compile_s,
                         compiler=report.compiler)


def compile_cubin(source: str, options: Sequence[str] = (), arch: str = DEFAULT_ARCH, *,
                  sass: bool = True, use_cache: bool = True, timeout_s: float = 180.0) -> CompileOutput:
    """Compile `source` to a cubin for `arch` with the engine the source calls for (NVRTC or nvcc);
    never raises for a bad source."""
    engine, label, flags, cached = _engine_entry(source, options, arch)
    report = None
    if use_cache and (cached / "report.json").is_file():
        try:
            data = json.loads((cached / "report.json").read_text())
            report = _report_from_json(data)
            cubin = (cached / "k.cubin").read_bytes() if report.ok else None
        except (OSError, ValueError, KeyError, TypeError):
            report = None
        else:
            if not report.ok and data.get("diagnostics_version") != DIAGNOSTICS_VERSION:
                report = None   # a failed compile's errors as an older parser read them: compiled again
        if report is not None and report.ok and cubin is not None:
            # An entry cached or carried (seed_cache) before CuTe's fallbacks were looked for.
            fallback = cute_fallback(cubin, _target_arch(options, arch))
            if fallback is not None:
                return CompileOutput(_fallback_report(report, fallback), None)
        if report is not None:
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
    transient = False
    if engine.name == "nvrtc":
        try:
            answer = server_pool().compile(source, SOURCE_NAME,
                                           [*flags, *(f"-I{d}" for d in toolkit_include_dirs())], sass, timeout_s)
        except NvrtcUnavailable as exc:   # a server that cannot start is a missing tool, not a bad source
            raise ToolMissing(f"NVRTC: {exc}") from exc
        log = redact_foreign(answer.log, SOURCE_NAME)
        ok, cubin = answer.ok, answer.cubin
        transient = not ok and answer.log.startswith(NVRTC_TRANSIENT)
        sass_dump = answer.sass_dump
        if ok and sass and sass_dump is None:
            notes.append(f"{SASS_UNAVAILABLE}{answer.sass_error}]")
    else:
        log, ok, cubin, transient = _run_nvcc(flags, source, timeout_s)
        if not engine.reason.startswith("the source"):
            notes.append(f"[compiled with nvcc: {engine.reason}]")
    elapsed = time.perf_counter() - started
    fallback = cute_fallback(cubin, _target_arch(options, arch)) if ok and cubin is not None else None
    diagnostics = parse_diagnostics(log, SOURCE_NAME, source)
    if fallback is not None:
        # The cubin builds but cannot run: no facts or cubin of it, and the reason as its one error.
        ok, cubin = False, None
        log = f"{log.rstrip()}\n{fallback}"
        diagnostics.append(CompileDiagnostic(None, fallback))
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
    # A compiler that crashed or ran out of time (NVRTC's or nvcc's) says nothing lasting about the
    # source: not cached, so a later compile, with more time or on a less busy machine, runs it again.
    if use_cache and (ok or diagnostics) and not transient:
        try:
            cached.mkdir(parents=True, exist_ok=True)
            if cubin is not None:
                _atomic_write(cached / "k.cubin", cubin)
            _atomic_write(cached / "report.json",
                          json.dumps({**asdict(report), "diagnostics_version": DIAGNOSTICS_VERSION}).encode())
        except OSError:
            pass
    return CompileOutput(report, cubin)


# What nvcc's log or exit says when it, or a tool it runs (cicc, ptxas), was stopped from outside: a
# time-out, a crash, the out-of-memory killer. Like NVRTC_TRANSIENT, such a failure says nothing lasting
# about the source and is not cached.
NVCC_TRANSIENT = ("nvcc did not finish", "nvcc crashed")
_TOOL_DIED = re.compile(r"'(?P<tool>[\w.+-]+)' died due to signal (?P<signal>\d+)(?: \((?P<name>[^)]*)\))?")
# bubblewrap exits with 128 + the signal that ended nvcc, as a shell does; a compile error gives no such status.
_SIGNALLED_STATUS = {128 + sig for sig in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS,
                                           signal.SIGILL, signal.SIGFPE, signal.SIGTERM)}


def _nvcc_crash(returncode: int, log: str) -> str | None:
    """Why nvcc stopped without a verdict on the source (a tool it ran, or nvcc itself, ended by a
    signal), as the end of a sentence; None when it ran to its end."""
    died = _TOOL_DIED.search(log)
    if died:
        return f"{died.group('tool')} was ended by signal {died.group('signal')}" + \
            (f" ({died.group('name')})" if died.group("name") else "")
    if returncode < 0 or returncode in _SIGNALLED_STATUS:
        number = -returncode if returncode < 0 else returncode - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"nvcc was ended by {name}"
    return None


def _run_nvcc(flags: list[str], source: str, timeout_s: float) -> tuple[str, bool, bytes | None, bool]:
    """nvcc in the compile sandbox: (log with other files' text redacted, ok, cubin, transient), where
    `transient` says the compile ran out of time or crashed, which says nothing about the source."""
    with tempfile.TemporaryDirectory(prefix="kl-nvcc-") as tmp:
        src = os.path.join(tmp, SOURCE_NAME)
        Path(src).write_text(source)
        out_path = os.path.join(tmp, "k.cubin")
        argv = [find_tool("nvcc"), *flags, *include_flags(), "-o", out_path, src]
        # nvcc runs cicc, ptxas and the host compiler as children: in a session of its own, so that a
        # time-out ends all of them, not nvcc alone (unsandboxed, cicc would go on compiling for minutes).
        proc = subprocess.Popen(sandboxed(argv, tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp, env=_tool_env(), start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return (f"{NVCC_TRANSIENT[0]} within {timeout_s:g} s: the compile's time limit stopped it, "
                    "not an error in the source.", False, None, True)
        except BaseException:
            _kill_group(proc)
            raise
        log = redact_foreign((stdout + stderr).replace(tmp + os.sep, ""), SOURCE_NAME)
        ok = proc.returncode == 0 and os.path.isfile(out_path)
        crash = None if ok else _nvcc_crash(proc.returncode, log)
        if crash:
            log = (f"{log.rstrip()}\n" if log.strip() else "") + \
                f"{NVCC_TRANSIENT[1]} while compiling this source ({crash}): a crash, not an error in the source."
        return log, ok, (Path(out_path).read_bytes() if ok else None), crash is not None


def _kill_group(proc: subprocess.Popen) -> None:
    """End nvcc's session (nvcc and every tool it started) and reap nvcc. Called only while nvcc is
    not yet reaped, so its process group id cannot have been given to another process."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        try:
            proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            proc.kill()
            proc.wait()


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


SASS_UNAVAILABLE = "[sass counts unavailable: "
# How a failed compile's log is read into diagnostics (parse_diagnostics); a cached failure stored by
# an older reading is compiled again. 2: ptxas's located errors, header errors on the user's line.
DIAGNOSTICS_VERSION = 2


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
