"""Candidates: CUDA source + a launch plan over the problem's arguments (docs/contracts.md)."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .spec import (ArgSpec, CudaReference, KernelLaunch, LaunchStep, MemsetStep, Problem, SpecError,
                   _check_evaluates, check_launch_signatures, parse_args, parse_launch)

# Options a candidate may pass to the compiler; each maps to its NVRTC spelling.
_OPTION_PATTERNS = [
    (re.compile(r"^-{1,2}maxrregcount=(\d+)$"), lambda m: f"--maxrregcount={m.group(1)}"),
    (re.compile(r"^-{1,2}use_fast_math$"), lambda m: "--use_fast_math"),
    (re.compile(r"^-{1,2}(ftz|prec-div|prec-sqrt|fmad)=(true|false)$"), lambda m: f"--{m.group(1)}={m.group(2)}"),
    (re.compile(r"^-D([A-Za-z_][A-Za-z0-9_]*)(=[A-Za-z0-9_.+-]*)?$"), lambda m: m.group(0)),
    (re.compile(r"^-{1,2}std=c\+\+(17|20)$"), lambda m: f"--std=c++{m.group(1)}"),
    (re.compile(r"^-lineinfo$"), lambda m: "-lineinfo"),
    (re.compile(r"^--extra-device-vectorization$"), lambda m: "--extra-device-vectorization"),
    (re.compile(r"^-{1,2}expt-relaxed-constexpr$"), lambda m: "--expt-relaxed-constexpr"),
    # The architecture-specific target (sm_90a) that wgmma and TMA instructions need.
    (re.compile(r"^(?:-arch|--gpu-architecture)=(sm_\d+a)$"), lambda m: f"--gpu-architecture={m.group(1)}"),
]
_ARCH_OPTION = re.compile(r"^--gpu-architecture=(sm_\d+a)$")


def arch_option(options: tuple[str, ...] | list[str]) -> str | None:
    """The architecture a candidate asks for in its compile options ('sm_90a'), or None."""
    for option in nvrtc_options(options):
        match = _ARCH_OPTION.match(option)
        if match:
            return match.group(1)
    return None


def nvrtc_options(options: tuple[str, ...] | list[str]) -> list[str]:
    """Translate (and so whitelist) candidate compile options for NVRTC."""
    out = []
    for option in options:
        for pattern, translate in _OPTION_PATTERNS:
            match = pattern.match(option)
            if match:
                out.append(translate(match))
                break
        else:
            raise SpecError("candidate.compile_options", f"the option {option!r} is not allowed")
    return out


def nvcc_options(options: tuple[str, ...] | list[str]) -> list[str]:
    """Candidate options for nvcc; the architecture is left out (the caller passes one -arch)."""
    translated = nvrtc_options(options)   # checks the whitelist
    return [o.replace("--maxrregcount", "-maxrregcount") for o in translated if not _ARCH_OPTION.match(o)]


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
    nvrtc_options(candidate.compile_options)
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
