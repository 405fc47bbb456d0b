"""Candidates: CUDA source + a launch plan over the problem's arguments (docs/contracts.md)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .spec import (ArgSpec, CudaReference, KernelLaunch, LaunchStep, MemsetStep, Problem, SpecError,
                   _check_evaluates, check_launch_signatures, parse_args, parse_launch)

# --- compile options ---------------------------------------------------------------------------------
# The options a problem (`[problem] compile_options`, `[family] compile_options`) or a candidate may give
# the compiler, and their NVRTC and nvcc spellings. It is an allow-list because compiles run on the
# server: in the compile sandbox, but an option must still not name a file to read or write (-o, -I,
# -include, -optf...), hand options to another program (-Xcompiler, -ccbin...), nor change the
# architecture (KernelLab compiles for the card it measures). nvcc runs its sub-commands through a
# shell, with each option in double quotes, so a -D value holds no quote, backslash, $ or backquote
# (`-DX=$(cmd)` would run cmd); nor a space or comma (nvcc splits lists at commas).
# docs/spec.md ("Compile options") lists the same; keep the two in step.
_DEFINE_VALUE = r"[A-Za-z0-9_.+\-*/%()<>=!~^&|:?\[\]]*"
_DEFINE = re.compile(rf"^-D([A-Za-z_][A-Za-z0-9_]*)(=({_DEFINE_VALUE}))?$")
_UNDEFINE = re.compile(r"^-U([A-Za-z_][A-Za-z0-9_]*)$")
# ptxas options (after -Xptxas / --ptxas-options) that change code or messages, never files.
_PTXAS_OPTIONS = re.compile(r"^(?:-v|--verbose|-O[0-3]|--opt-level=[0-3]|--warn-on-spills|-warn-spills|"
                            r"--warn-on-local-memory-usage|-warn-lmem-usage|--warn-on-double-precision-use|"
                            r"-warn-double-usage|-dlcm=(?:ca|cg|cs|lu|cv)|--def-load-cache=(?:ca|cg|cs|lu|cv)|"
                            r"-dscm=(?:wb|cg|cs|wt)|--def-store-cache=(?:wb|cg|cs|wt)|"
                            r"--allow-expensive-optimizations(?:=(?:true|false))?|-allow-expensive-optimizations)$")
# Options that take their value as the next list item (`"-maxrregcount", "64"`) or after one space.
_TAKES_VALUE = re.compile(r"^(?:-D|-U|-{1,2}maxrregcount|-Xptxas|--ptxas-options|-arch|--gpu-architecture|"
                          r"-{1,2}std|-o|--output-file|-I|--include-path|-isystem|-include|--pre-include|-ccbin|"
                          r"--compiler-bindir|-Xcompiler|--compiler-options|-Xlinker|--linker-options|-Xnvlink|"
                          r"--nvlink-options|-Xarchive|--archive-options|-odir|--output-directory|-optf|"
                          r"--options-file|-MF|--dependency-output|--keep-dir|-code|--gpu-code|-gencode|"
                          r"--generate-code|-L|-l|--library-path|--library)$")
_ARCH_LIKE = re.compile(r"^(?:-arch|--gpu-architecture|-code|--gpu-code|-gencode|--generate-code)(?:[= ]|$)")
_FILE_OPTIONS = re.compile(r"^(?:-o|--output-file|-I|--include-path|-isystem|-include|--pre-include|-odir|"
                           r"--output-directory|-optf|--options-file|-M|-MD|-MMD|-MF|--dependency-output|"
                           r"-keep|--keep|--keep-dir|-save-temps|--save-temps|-L|-l|--library-path|--library|"
                           r"--use-local-env|-dryrun|--dryrun|-run|--run|-E|--preprocess)(?:[= ]|$)|^-[IL]\S|^-o\S")
_TOOL_OPTIONS = re.compile(r"^(?:-ccbin|--compiler-bindir|-Xcompiler|--compiler-options|-Xlinker|"
                           r"--linker-options|-Xnvlink|--nvlink-options|-Xarchive|--archive-options|"
                           r"-Xcudafe|-Xcicc|-Xnvvm)(?:[= ]|$)")
_EXTENDED_LAMBDA = "--extended-lambda"
ALLOWED_OPTIONS = ("-O0..-O3 (accepted, no effect on a cubin), -maxrregcount=N (or \"-maxrregcount\", \"N\"), "
                   "--use_fast_math, --ftz/--prec-div/--prec-sqrt/--fmad=true|false, -DNAME[=VALUE], -UNAME, "
                   "-std=c++17|c++20, -lineinfo, --extra-device-vectorization, --restrict, "
                   "--expt-relaxed-constexpr, --extended-lambda, --diag-suppress=N[,N...], "
                   "-Xptxas=<-v|-O0..-O3|--warn-on-spills|-dlcm=..|-dscm=..> and -arch=sm_NNa")


@dataclass(frozen=True)
class _Option:
    written: str                 # as given (a pair written as two list items is shown as one)
    nvrtc: tuple[str, ...] = ()  # NVRTC's spelling ((): nothing to pass)
    nvcc: tuple[str, ...] = ()   # nvcc's spelling
    arch: str | None = None      # the architecture-specific target it asks for


def _gather(options: tuple[str, ...] | list[str]) -> list[tuple[str, str, str | None]]:
    """(as written, the option, its value or None) for each option, with a value written as the next
    list item (`"-maxrregcount", "64"`) or after one space (`"-maxrregcount 64"`) joined to it."""
    out: list[tuple[str, str, str | None]] = []
    items = list(options)
    i = 0
    while i < len(items):
        item, following = items[i], items[i + 1] if i + 1 < len(items) else None
        if following is not None and _TAKES_VALUE.match(item) and (
                not following.startswith("-") or _TOOL_OPTIONS.match(item) or item in ("-Xptxas", "--ptxas-options")):
            out.append((f"{item} {following}", item, following))
            i += 2
            continue
        match = re.match(r"^(\S+) (\S+)$", item)
        if match and _TAKES_VALUE.match(match.group(1)):
            out.append((item, match.group(1), match.group(2)))
        else:
            out.append((item, item, None))
        i += 1
    return out


def _refusal(flag: str) -> str | None:
    """Why an option that names files, calls another tool or sets the architecture is refused."""
    if _ARCH_LIKE.match(flag):
        return ("KernelLab compiles for the GPU it measures and sets the architecture itself; the one "
                "architecture option accepted is -arch=sm_NNa, that GPU's architecture-specific target "
                "(sm_90a on an H100), which wgmma, TMA multicast and setmaxnreg need")
    if _FILE_OPTIONS.match(flag):
        return ("it names a file or folder: KernelLab chooses every file a compile reads or writes "
                "(headers come from the allowed include folders)")
    if _TOOL_OPTIONS.match(flag):
        return "it passes options to the host compiler or another tool"
    return None


def _translate_one(written: str, flag: str, value: str | None) -> _Option | str:
    """An allowed option's spellings, or why it is refused."""
    option = written
    if value is None:
        text = flag
        if re.search(r"\s", text):
            words = text.split()
            return next((r for r in map(_refusal, words[1:]) if r), None) or \
                "it holds a space: give each option and each value as its own list item"
    elif _refusal(flag) and not re.match(r"^(?:-arch|--gpu-architecture)$", flag):
        return _refusal(flag)
    else:
        text = flag + value if flag in ("-D", "-U") else f"{flag}={value}"
    if re.match(r"^-O[0-3]$", text):
        return _Option(option)   # nvcc's host-code level: a cubin has no host code (device code: -Xptxas -O)
    if m := re.match(r"^-{1,2}maxrregcount=(\d+)$", text):
        return _Option(option, (f"--maxrregcount={m.group(1)}",), (f"-maxrregcount={m.group(1)}",))
    if re.match(r"^-{1,2}use_fast_math$", text):
        return _Option(option, ("--use_fast_math",), ("--use_fast_math",))
    if m := re.match(r"^-{1,2}(ftz|prec-div|prec-sqrt|fmad)=(true|false)$", text):
        spelt = f"--{m.group(1)}={m.group(2)}"
        return _Option(option, (spelt,), (spelt,))
    if _DEFINE.match(text) or _UNDEFINE.match(text):
        return _Option(option, (text,), (text,))
    if text.startswith(("-D", "-U")):
        return ("a macro is -DNAME or -DNAME=VALUE, where VALUE holds letters, digits and _ . + - * / % ( ) "
                "< > = ! ~ ^ & | : ? [ ] only (no spaces, commas, quotes, backslashes, $ or backquotes: "
                "nvcc hands it to a shell)")
    if m := re.match(r"^-{1,2}std=c\+\+(17|20)$", text):
        return _Option(option, (f"--std=c++{m.group(1)}",), (f"--std=c++{m.group(1)}",))
    if text in ("-lineinfo", "--generate-line-info"):
        return _Option(option, ("-lineinfo",), ("-lineinfo",))
    if text in ("--extra-device-vectorization", "--restrict", "-restrict"):
        spelt = "--restrict" if "restrict" in text else text
        return _Option(option, (spelt,), (spelt,))
    if re.match(r"^-{1,2}expt-relaxed-constexpr$", text):
        return _Option(option, ("--expt-relaxed-constexpr",), ("--expt-relaxed-constexpr",))
    if re.match(r"^-{1,2}(?:expt-)?extended-lambda$", text):
        # NVRTC has no such option (it compiles device code only, and refuses annotated lambdas): a
        # compile that asks for it goes to nvcc (nvrtc.choose_engine).
        return _Option(option, (), (_EXTENDED_LAMBDA,))
    if m := re.match(r"^-{1,2}diag-suppress=(\d+(?:,\d+)*)$", text):
        return _Option(option, (f"--diag-suppress={m.group(1)}",), (f"--diag-suppress={m.group(1)}",))
    if m := re.match(r"^(?:-Xptxas|--ptxas-options)=(.+)$", text):
        parts = m.group(1).split(",")
        bad = [p for p in parts if not _PTXAS_OPTIONS.match(p)]
        if bad:
            return (f"{bad[0]!r} is not one of the ptxas options accepted (-v, -O0..-O3, --warn-on-spills, "
                    "--warn-on-local-memory-usage, --warn-on-double-precision-use, -dlcm=.., -dscm=.., "
                    "--allow-expensive-optimizations)")
        spelt = tuple(f"--ptxas-options={p}" for p in parts)
        return _Option(option, spelt, spelt)
    if m := re.match(r"^(?:-arch|--gpu-architecture)=(sm_\d+a)$", text):
        # The architecture-specific target (sm_90a) that wgmma, TMA multicast and setmaxnreg need.
        return _Option(option, (f"--gpu-architecture={m.group(1)}",), (), arch=m.group(1))
    return _refusal(text) or "it is not one of the compile options KernelLab accepts"


def translate_options(options: tuple[str, ...] | list[str], where: str = "compile_options") -> list[_Option]:
    """Each allowed option with its NVRTC and nvcc spellings; a SpecError at `where` (the field the
    options came from: problem.compile_options, family.compile_options, candidate.compile_options)
    that lists every refused option, each with why."""
    translated: list[_Option] = []
    refused: dict[str, list[str]] = {}   # why -> the options refused for it, in the order given
    for written, flag, value in _gather(options):
        result = _translate_one(written, flag, value)
        if isinstance(result, str):
            refused.setdefault(result, []).append(written)
        else:
            translated.append(result)
    if refused:
        count = sum(len(written) for written in refused.values())
        if count == 1:
            (why, (written,)), = refused.items()
            message = f"the option {written!r} is not allowed: {why}"
        else:
            message = f"{count} options are not allowed: " + "; ".join(
                f"{', '.join(map(repr, written))} ({why})" for why, written in refused.items())
        raise SpecError(where, f"{message}. Allowed: {ALLOWED_OPTIONS} (docs/spec.md, \"Compile options\").")
    return translated


def check_compile_options(options: Any, where: str) -> list[str]:
    """`options` (a problem's or family's `compile_options`, or a candidate's) checked against the
    allow-list; a SpecError at `where` lists every refused one. Returns the list."""
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise SpecError(where, f"must be a list of strings, not {options!r}")
    translate_options(options, where)
    return list(options)


def arch_option(options: tuple[str, ...] | list[str]) -> str | None:
    """The architecture a candidate asks for in its compile options ('sm_90a'), or None."""
    for option in translate_options(options):
        if option.arch:
            return option.arch
    return None


def needs_nvcc(options: tuple[str, ...] | list[str]) -> str | None:
    """Why NVRTC cannot honour these options (an option only nvcc has), or None."""
    for option in translate_options(options):
        if _EXTENDED_LAMBDA in option.nvcc:
            return f"the compile options ask for {option.written}, which NVRTC does not offer"
    return None


def nvrtc_options(options: tuple[str, ...] | list[str], where: str = "compile_options") -> list[str]:
    """Translate (and so whitelist) compile options for NVRTC (an -arch=sm_NNa as --gpu-architecture)."""
    return [spelt for option in translate_options(options, where) for spelt in option.nvrtc]


def nvcc_options(options: tuple[str, ...] | list[str], where: str = "compile_options") -> list[str]:
    """Compile options for nvcc; the architecture is left out (the caller passes one -arch)."""
    return [spelt for option in translate_options(options, where) for spelt in option.nvcc]


def options_field(problem: Problem, candidate: "Candidate") -> str:
    """The spec field a candidate's compile options came from, for messages: the reference's are
    problem.compile_options, a family variant's family.compile_options."""
    options = tuple(candidate.compile_options)
    reference = problem.reference
    if candidate.name == "reference" and options == tuple(getattr(reference, "compile_options", ()) or ()):
        return "problem.compile_options"
    family = problem.family
    if family is not None and candidate.knobs is not None and options == tuple(family.compile_options):
        return "family.compile_options"
    return "candidate.compile_options"


@dataclass(frozen=True)
class Candidate:
    source: str
    launch: tuple[LaunchStep, ...]
    temps: tuple[ArgSpec, ...] = ()
    compile_options: tuple[str, ...] = ()
    knobs: Mapping[str, Any] | None = None
    name: str = "candidate"
    extra_names: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @property
    def source_hash(self) -> str:
        return source_hash(self.source)

    @property
    def kernel_names(self) -> list[str]:
        names: list[str] = []
        for step in self.launch:
            if isinstance(step, KernelLaunch) and step.kernel not in names:
                names.append(step.kernel)
        return names

    def to_dict(self) -> dict:
        return {"source": self.source, "launch": [s.to_dict() for s in self.launch],
                "temps": [{"name": t.name, "dtype": t.dtype, "shape": [d.text for d in t.shape]}
                          for t in self.temps],
                "compile_options": list(self.compile_options),
                "knobs": dict(self.knobs) if self.knobs is not None else None, "name": self.name}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], problem: Problem) -> "Candidate":
        """Build and check a candidate for `problem` from its plain-dict form."""
        if not isinstance(data, Mapping):
            raise SpecError("candidate", "must be a mapping")
        extra = set(data) - {"source", "launch", "temps", "compile_options", "knobs", "name"}
        if extra:
            raise SpecError(f"candidate.{sorted(extra)[0]}", "unknown field")
        source = data.get("source")
        if not isinstance(source, str) or not source.strip():
            raise SpecError("candidate.source", "must be non-empty CUDA source")
        names = problem.size_names
        temps = parse_args([{**t, "role": "temp"} if isinstance(t, dict) else t
                            for t in (data.get("temps") or [])],
                           "candidate.temps", names, allow_temps=True, roles=("temp",))
        clash = {t.name for t in temps} & {a.name for a in problem.args}
        if clash:
            raise SpecError("candidate.temps", f"'{sorted(clash)[0]}' is already an argument of the problem")
        all_args = {a.name: a for a in problem.args} | {t.name: t for t in temps}
        if problem.reference.kind == "pytorch" and not data.get("launch"):
            launch = []   # a KernelBench solution: ModelNew launches its own kernels
        else:
            launch = parse_launch(data.get("launch"), "candidate.launch", names, all_args)
        options = data.get("compile_options") or []
        if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
            raise SpecError("candidate.compile_options", "must be a list of strings")
        knobs = data.get("knobs")
        if knobs is not None and not isinstance(knobs, Mapping):
            raise SpecError("candidate.knobs", "must be a mapping or null")
        candidate = cls(source=source, launch=tuple(launch), temps=tuple(temps),
                        compile_options=tuple(options), knobs=dict(knobs) if knobs else knobs,
                        name=str(data.get("name") or "candidate"))
        check_candidate(problem, candidate)
        return candidate


def source_hash(source: str) -> str:
    """The exact source text's hash: the key of recorded measurements (records' "source_hash")."""
    return hashlib.sha256(source.encode()).hexdigest()


def check_kernelbench_solution(problem: Problem, candidate: Candidate) -> None:
    """A candidate of a PyTorch-reference problem is a KernelBench solution (`class ModelNew`) or the
    reference program itself, read with `ast` only."""
    from .kernelbench import ProgramError, parse_program

    if candidate.launch or candidate.temps or candidate.compile_options:
        raise SpecError("candidate.launch", "a KernelBench solution has no launch plan, temps or compile options: "
                                            "its ModelNew launches its own kernels")
    if candidate.source == problem.reference.source:
        return
    try:
        parse_program(candidate.source, model_class="ModelNew")
    except ProgramError as exc:
        raise SpecError("candidate.source", exc.message) from None


def check_candidate(problem: Problem, candidate: Candidate) -> None:
    """Raise SpecError unless the candidate's launch plan fits the problem in every size case."""
    if problem.reference.kind == "pytorch":
        check_kernelbench_solution(problem, candidate)
        return
    all_args = {a.name: a for a in problem.args} | {t.name: t for t in candidate.temps}
    nvrtc_options(candidate.compile_options, options_field(problem, candidate))
    if not candidate.launch:
        raise SpecError("candidate.launch", "is empty")
    for i, step in enumerate(candidate.launch):
        if isinstance(step, MemsetStep):
            if step.arg not in all_args or all_args[step.arg].role in ("input", "scalar"):
                raise SpecError(f"candidate.launch[{i}].memset", f"cannot set '{step.arg}'")
            continue
        for j, name in enumerate(step.args):
            if name not in all_args:
                raise SpecError(f"candidate.launch[{i}].args[{j}]", f"unknown argument '{name}'")
        used = set().union(*(e.names for e in step.grid + step.block + (step.shared,)))
        unknown = used - problem.size_names
        if unknown:
            raise SpecError(f"candidate.launch[{i}]", f"unknown name '{sorted(unknown)[0]}' "
                                                      f"(only sizes: {', '.join(sorted(problem.size_names))})")
    for case in problem.sizes:
        _check_evaluates(list(problem.args) + list(candidate.temps), list(candidate.launch), case,
                         "candidate.")
    check_launch_signatures(candidate.launch, "candidate.launch", all_args, candidate.source, "the candidate's source")


def reference_candidate(problem: Problem) -> Candidate:
    """The reference itself as a candidate (its speedup should be 1)."""
    reference = problem.reference
    if not isinstance(reference, CudaReference):
        raise SpecError("problem.reference", f"a {reference.kind} reference is not a CUDA candidate")
    return Candidate(source=reference.source, launch=reference.launch,
                     compile_options=reference.compile_options, name="reference")
