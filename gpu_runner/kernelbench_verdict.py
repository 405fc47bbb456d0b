"""What a KernelBench solution's evidence means: one status and one reason, with notes on how much of
the work PyTorch did. Torch-free: the GPU worker (gpu_runner.pytorch_worker) gathers the evidence, this
module judges it, so the judging is tested without a GPU."""
from __future__ import annotations

import ast
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from .directives import find_forbidden_directive
from .guards import timer_escape
from .settings import MeasureSettings

# Kernel names that come from PyTorch and its libraries (used for notes; a kernel counts as the solution's own
# only when own_kernel_names/split_kernels below find it in the solution's sources or its built extension).
LIBRARY_KERNEL = re.compile(r"at::|at_cuda_detail|aten|cublas|cudnn|cutlass|gemm|gemv|sm\d+_xmma|xmma|ampere_|"
                            r"nvjet|hopper_|volta_|turing_|magma|cub::|triton_|nchwToNhwc|nhwcToNchw|implicit_convolve|"
                            r"convolve_|cask_|fft|splitKreduce|Kernel2D|memcpy|memset|elementwise_kernel|"
                            r"reduce_kernel|vectorized_", re.IGNORECASE)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_GLOBAL_NAME = re.compile(r"__global__[^;{}()]*?\b(\w+)\s*\(")
_NAMESPACE = re.compile(r"\bnamespace\s+(\w+)")
# Which rule split the kernels into the solution's own and the rest (evidence without it is split again).
KERNEL_RULE = "own-names-2"
_EXTENSION_CALL = re.compile(r"\b(load_inline|load|RawKernel|RawModule|compile_with_cache)\s*\(")
# What the build of a solution prints before each extension build that failed (see pytorch_worker).
BUILD_FAILED_MARK = "KL-EXTENSION-BUILD-FAILED"
FALLBACK_MESSAGE = re.compile(r"fall(ing)?\s*back|fallback|using (the )?pytorch|torch implementation", re.IGNORECASE)
# Ops that move or describe memory rather than compute the result.
BOOKKEEPING_OPS = {"empty", "empty_like", "empty_strided", "view", "reshape", "_reshape_alias", "as_strided",
                   "t", "transpose", "permute", "expand", "contiguous", "clone", "copy_", "_to_copy", "to", "zeros",
                   "zeros_like", "ones", "ones_like", "fill_", "zero_", "detach", "alias", "unsqueeze", "squeeze",
                   "flatten", "unflatten", "select", "slice", "split", "chunk", "size", "stride", "is_contiguous",
                   "lift_fresh", "new_empty", "new_zeros", "resize_", "set_", "unbind", "narrow", "item",
                   "_local_scalar_dense", "full", "full_like", "arange", "view_as", "expand_as", "record_stream"}


@dataclass
class SolutionVerdict:
    status: str
    reason: str
    notes: list[str] = field(default_factory=list)
    speedup: float | None = None


def extension_sources(program_source: str) -> list[str]:
    """The C++/CUDA text a solution hands to load_inline: its string constants that hold a directive or
    a kernel (an f-string's literal parts are included)."""
    try:
        tree = ast.parse(program_source)
    except SyntaxError:
        return []
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        else:
            continue
        if "#" in text or "__global__" in text:
            texts.append(text)
    return texts


def extension_refusal(program_source: str) -> str | None:
    """The include allow-list applied to the extension sources (torch's own headers allowed too)."""
    for text in extension_sources(program_source):
        refusal = find_forbidden_directive(text, extension=True)
        if refusal is not None:
            return f"An extension source in the program: {refusal.reason}"
    return None


def own_kernel_names(program_source: str) -> tuple[set[str], set[str]]:
    """(kernel names, namespaces) the solution itself defines: every `__global__` function in its C++/CUDA
    strings (templated, extern "C", with __launch_bounds__) and every @triton.jit function."""
    names: set[str] = set()
    namespaces: set[str] = set()
    for text in extension_sources(program_source):
        text = _LAUNCH_BOUNDS.sub(" ", text)
        names.update(n for n in _GLOBAL_NAME.findall(text) if n not in ("void", "static", "inline"))
        namespaces.update(_NAMESPACE.findall(text))
    try:
        tree = ast.parse(program_source)
    except SyntaxError:
        return names, namespaces
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                label = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                if label in ("jit", "autotune", "heuristics"):
                    names.add(node.name)
    return names, namespaces


def _kernel_base(name: str) -> tuple[list[str], str]:
    """(qualifiers, unqualified name) of a profiler kernel name such as
    'void at::native::(anonymous namespace)::k<4, float>(int, float*)' -> (['at', 'native', 'anon'], 'k')."""
    text = re.sub(r"^\s*(void\s+)?", "", name.replace("(anonymous namespace)", "anon"))
    match = re.match(r"[\w:~]+", text)
    parts = [p for p in (match.group(0) if match else text).split("::") if p]
    return (parts[:-1], parts[-1]) if parts else ([], "")


def _normalised(name: str) -> str:
    return re.sub(r"\s+", "", re.sub(r"^\s*void\s+", "", name))


def split_kernels(kernels: dict[str, int], program_source: str,
                  extension_symbols: list[str] | tuple[str, ...] = ()) -> tuple[dict[str, int], dict[str, int]]:
    """The kernels one call launched, split into the solution's own and everything else (PyTorch's and its
    libraries'). Own: a kernel compiled into the solution's built extension (its symbol table, which holds
    template instantiations such as a CUTLASS kernel the extension made), or one whose unqualified name is a
    kernel the solution's sources define, in no namespace the solution does not declare (so a PyTorch
    kernel that happens to share a name, at::native::...::hardsigmoid_kernel, is not counted)."""
    names, namespaces = own_kernel_names(program_source)
    symbols = {_normalised(s) for s in extension_symbols}
    own: dict[str, int] = {}
    other: dict[str, int] = {}
    for name, count in kernels.items():
        qualifiers, base = _kernel_base(name)
        mine = _normalised(name) in symbols or (
            base in names and all(q in namespaces or q == "anon" for q in qualifiers))
        (own if mine else other)[name] = (own if mine else other).get(name, 0) + count
    return own, other


def work_ops(aten_ops: dict[str, int]) -> dict[str, int]:
    return {name: n for name, n in aten_ops.items() if name.split(".")[0].lstrip("_") not in BOOKKEEPING_OPS
            and name.split(".")[0] not in BOOKKEEPING_OPS}


def judge_solution(evidence: dict[str, Any], settings: MeasureSettings | None = None,
                   source: str | None = None) -> SolutionVerdict:
    """evidence: what pytorch_worker.measure_solution saw (plain dict, see there). With the solution's
    `source`, evidence recorded before the worker split kernels by the solution's own names (no
    "kernel_rule") is split again here, so old records are judged by the same rule."""
    settings = settings or MeasureSettings()
    if source is not None and evidence.get("kernels_seen") is not None and evidence.get("kernel_rule") != KERNEL_RULE:
        seen = {**(evidence.get("library_kernels") or {})}
        for name, count in (evidence.get("custom_kernels") or {}).items():
            seen[name] = seen.get(name, 0) + count
        own, other = split_kernels(seen, source, evidence.get("extension_symbols") or ())
        evidence = {**evidence, "custom_kernels": own, "library_kernels": other, "kernel_rule": KERNEL_RULE}
    if evidence.get("refusal"):
        return SolutionVerdict("rejected-guard", evidence["refusal"])
    if evidence.get("build_error"):
        return SolutionVerdict("failed-compile", f"The solution does not build: {_build_error(evidence['build_error'])}")
    if evidence.get("memory_refusal"):
        # The problem, not the solution, is too large for the cap: nothing ran (pytorch_worker._memory_precheck).
        return SolutionVerdict("unavailable", str(evidence["memory_refusal"]))
    if evidence.get("reference_error"):
        return SolutionVerdict("unavailable", f"The reference failed: {_last_line(evidence['reference_error'])}")
    if evidence.get("runtime_error"):
        return SolutionVerdict("failed-runtime", f"ModelNew failed: {_last_line(evidence['runtime_error'])}")
    if evidence.get("inputs_modified"):
        return SolutionVerdict("rejected-guard", f"ModelNew modified its input(s) {', '.join(evidence['inputs_modified'])}; "
                                                 "inputs are read-only.")
    notes = _work_notes(evidence)
    for draw in evidence.get("draws", []):
        if draw.get("ok"):
            continue
        if draw.get("memoised_from") is not None:
            return SolutionVerdict("rejected-guard", f"On input draw {draw['index']} ModelNew returned the result of draw "
                                                     f"{draw['memoised_from']} (a result reused across inputs).", notes)
        if draw.get("shape_error"):
            return SolutionVerdict("failed-correctness", f"Draw {draw['index']}: {draw['shape_error']}", notes)
        if draw.get("poison", 0) > 0:
            return SolutionVerdict("rejected-guard", f"Draw {draw['index']}: {draw['poison']} output element(s) still hold "
                                                     "the poison written before the call (left unwritten).", notes)
        return SolutionVerdict("failed-correctness", f"Wrong on input draw {draw['index']}: {draw['bad']} of {draw['numel']} "
                                                     f"elements outside atol=rtol={evidence.get('tolerance', 1e-2):g} "
                                                     f"(max abs error {draw['max_abs']:.3g}).", notes)
    if evidence.get("post_timing_ok") is False:
        return SolutionVerdict("rejected-guard", "Correct before timing but wrong on the last timed inputs (state kept "
                                                 "across calls).", notes)
    fallback = evidence.get("fallback_message")
    if fallback:
        return SolutionVerdict("rejected-guard", f"The solution printed \"{fallback[:120]}\": PyTorch did the work, "
                                                 "not its kernel.", notes)
    custom = evidence.get("custom_kernels") or {}
    measured = _speedup(evidence)
    if evidence.get("kernels_seen") is not None and not custom:
        verdict = _no_kernel_of_its_own(evidence, source, notes, measured)
        if verdict.status != "ok":
            return verdict
        notes = verdict.notes
    escape = timer_escape(evidence.get("escape"), margin_ms=settings.escape_margin_ms, ratio=settings.escape_ratio)
    if escape:
        return SolutionVerdict("rejected-guard", escape, notes)
    return _timed(evidence, notes)


def _timed(evidence: dict[str, Any], notes: list[str]) -> SolutionVerdict:
    ref_ms, cand_ms = evidence.get("reference_ms") or [], evidence.get("candidate_ms") or []
    if not ref_ms or not cand_ms:
        return SolutionVerdict("failed-runtime", "No timing was taken.", notes)
    speedup = statistics.median(ref_ms) / statistics.median(cand_ms)
    draws = len(evidence.get("draws", []))
    return SolutionVerdict("ok", f"Correct on {draws} input draw(s); {speedup:.3f}x eager PyTorch "
                                 f"({statistics.median(ref_ms):.4f} ms -> {statistics.median(cand_ms):.4f} ms, "
                                 f"n={len(cand_ms)}).", notes, speedup)


def _no_kernel_of_its_own(evidence: dict[str, Any], source: str | None, notes: list[str],
                          measured: float | None) -> SolutionVerdict:
    """Which of five things happened when no kernel of the solution's own ran in ModelNew.forward; "ok"
    (with a note, and no reason yet) where its own extension called a library such as cuBLAS directly."""
    ops = work_ops(evidence.get("aten_ops") or {})
    what = ", ".join(f"{name} x{n}" for name, n in sorted(ops.items(), key=lambda kv: -kv[1])[:4]) or \
        "no computing op at all (its output is a constant or a tensor made before the call)"
    same = " (the reference's own ops)" if ops and ops == work_ops(evidence.get("reference_aten_ops") or {}) else ""
    failed = [b for b in evidence.get("extension_builds") or [] if not b.get("ok")]
    if failed:
        return SolutionVerdict("failed-compile", f"Its extension '{failed[0]['name']}' did not build "
                                                 f"({failed[0]['error'][:200]}), so PyTorch did the work with "
                                                 f"{what}{same}.", notes, measured)
    names = own_kernel_names(source)[0] if source is not None else None
    extension = bool(source is not None and _EXTENSION_CALL.search(source))
    if names is not None and not names and not extension:
        return SolutionVerdict("rejected-guard", f"A PyTorch-level rewrite: the solution holds no kernel of its own "
                                                 f"(no __global__ function, no extension); PyTorch did the work with "
                                                 f"{what}{same}.", notes, measured)
    calls = evidence.get("extension_calls")
    library = evidence.get("library_kernels") or {}
    if calls is not None and not sum(calls.values()):
        built = ", which built," if evidence.get("extension_builds") else ""
        return SolutionVerdict("rejected-guard", f"Its kernel never ran: ModelNew.forward called no function of its "
                                                 f"extension{built} and took a PyTorch path; PyTorch did the work with "
                                                 f"{what}{same}.", notes, measured)
    if calls and ops:
        return SolutionVerdict("rejected-guard", f"Its extension launched no kernel of its own: it was called "
                                                 f"({', '.join(sorted(calls))[:120]}) but PyTorch ops did the work "
                                                 f"({what}{same}).", notes, measured)
    if calls and library:
        # Its own C++ called a library (cuBLAS, cuDNN) directly: its code chose the kernel, PyTorch did not.
        return SolutionVerdict("ok", "", [*notes, f"No kernel of its own: its extension called library kernels "
                                                  f"directly ({', '.join(sorted(library))[:160]})."])
    return SolutionVerdict("rejected-guard", f"No kernel of the solution's own ran in ModelNew.forward: PyTorch did "
                                             f"the work with {what}{same}.", notes, measured)


def _speedup(evidence: dict[str, Any]) -> float | None:
    """Eager time over the solution's time, also for a solution rejected for doing its work in PyTorch
    (a rewrite in PyTorch ops is still a measured program)."""
    ref_ms, cand_ms = evidence.get("reference_ms") or [], evidence.get("candidate_ms") or []
    return statistics.median(ref_ms) / statistics.median(cand_ms) if ref_ms and cand_ms else None


def _work_notes(evidence: dict[str, Any]) -> list[str]:
    notes = []
    library = evidence.get("library_kernels") or {}
    custom = evidence.get("custom_kernels") or {}
    if custom and library:
        notes.append(f"{sum(custom.values())} launch(es) of its own kernels and {sum(library.values())} of PyTorch or "
                     f"library kernels ({', '.join(sorted(library)[:3])[:160]}) per call.")
    ops = work_ops(evidence.get("aten_ops") or {})
    if custom and ops:
        notes.append(f"PyTorch ops beside its kernels: {', '.join(sorted(ops)[:6])}.")
    if evidence.get("fallback_message"):
        notes.append(f"printed: {evidence['fallback_message'][:120]}")
    changed = evidence.get("global_settings_changed") or {}
    if changed:
        what = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in sorted(changed.items()))
        notes.append(f"It switches PyTorch's process-wide settings ({what}): its calls ran with them and the "
                     "reference's with PyTorch's defaults, so part of its speedup can come from lower-precision "
                     "math (TF32) or cuDNN's autotuning rather than from its own kernels.")
    return notes


_COMPILER_ERROR = re.compile(r"(?:\berror\s*:|\): error|\b[A-Z]\w+Error\()")


def _build_error(log: str) -> str:
    """The extension the build marked as failed, with the compiler's first error line found in the log (the
    mark's own text is often the build command, which names no error); else the log's last line."""
    lines = str(log).splitlines()
    compiler = next((line.strip() for line in lines
                     if _COMPILER_ERROR.search(line) and not line.startswith(BUILD_FAILED_MARK)), None)
    for line in lines:
        if line.startswith(BUILD_FAILED_MARK):
            marked = line[len(BUILD_FAILED_MARK):].strip()
            name, _, text = marked.partition(" ")
            detail = compiler or (text if _COMPILER_ERROR.search(text) else "no compiler error line was kept in the log")
            return f"its extension {name} {_short_path(detail)}"[:300]
    return _short_path(compiler) if compiler else _last_line(log)


def _short_path(text: str) -> str:
    """A compiler line without the build folder's path (/tmp/kl-kernelbench-builds/<hash>/ext/<name>/)."""
    return re.sub(r"\S*/ext/[^/\s]+/", "", text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "no message")[:300]
