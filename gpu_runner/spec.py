# Over 400 lines on purpose: one pass over problem.toml that collects every spec mistake with its line.
"""Problem specs: `problem.toml` + `reference.cu` (format in docs/contracts.md).

`load_problem(folder)` and `parse_problem(toml_text, reference_source, family_source)` return a
`Problem`; any mistake raises `SpecError` naming the field and what is wrong with it.
"""
from __future__ import annotations

import ast
import hashlib
import math
import os
import re
import tomllib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

from klexpr import Expression, ExpressionError, parse_expression

from .dtypes import DEFAULT_TOLERANCE, DTYPES
from .signature import fitting_signature, kernel_signatures, launch_mismatches
from .toml_lines import field_line, syntax_error_line, toml_positions

ROLES = ("input", "output", "inout", "scalar", "temp")
BUFFER_ROLES = ("input", "output", "inout", "temp")
_SLUG = re.compile(r"^[a-z0-9_]+$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KNOB_STRING = re.compile(r"^[A-Za-z0-9_]+$")
_INIT = re.compile(r"^(normal|uniform|ones|zeros|randint:-?\d+:-?\d+|uniform:-?[\d.eE+-]+:-?[\d.eE+-]+)$")
VENDOR_KINDS = ("cublas_sgemm", "cublas_hgemm", "cublas_sgemv", "cupy_sum", "cupy_transpose", "cupy_softmax",
                "cupy_dot")
MAX_PROBLEM_BYTES_VARIABLE = "KERNELLAB_MAX_PROBLEM_BYTES"
DEFAULT_MAX_PROBLEM_BYTES = 64 * 1024**3
_BYTE_UNITS = {"": 1, "B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "TIB": 1024**4,
               "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}

# CUDA's launch limits on the GPUs KernelLab measures on (H100 and H200, compute capability 9.0). A
# launch beyond them fails on the GPU ("invalid configuration argument") in every measurement, so a
# spec or candidate whose launch breaks one in some size case is refused before anything runs.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)
# 227 KiB per block: the most dynamic shared memory a kernel may opt in to (the runner sets the opt-in).
MAX_DYNAMIC_SHARED_BYTES = 232448
GPU_LIMITS_NAME = "the H100 and H200"
_AXES = ("x", "y", "z")
# What a scalar argument of each dtype can carry: the runner converts the value to it (an int32 given
# 3000000000 raises OverflowError there, a float16 beyond 65504 too), so it is checked here first.
SCALAR_RANGES: dict[str, tuple[int | float, int | float]] = {
    "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1),
    "uint32": (0, 2**32 - 1),
    "uint8": (0, 2**8 - 1),
    "float16": (-65504.0, 65504.0),
    "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38),
    "float32": (-3.4028234663852886e38, 3.4028234663852886e38),
    "float64": (-1.7976931348623157e308, 1.7976931348623157e308),
}


class SpecError(ValueError):
    """A problem spec or a candidate is malformed; `field` says where, `message` what, and `line`
    (set for problem.toml) the TOML line it is written on."""

    def __init__(self, field: str, message: str, line: int | None = None):
        self.field = field
        self.message = message
        self.line = line
        super().__init__(f"{field}: {message}")

    @property
    def errors(self) -> list["SpecError"]:
        """Every mistake this error stands for (one here; several for SpecErrors)."""
        return [self]


class SpecErrors(SpecError):
    """Every mistake found in one reading of a spec, in the order found; `field`, `message` and
    `line` are the first one's."""

    def __init__(self, errors: Iterable[SpecError]):
        self._errors = [e for error in errors for e in error.errors]
        first = self._errors[0]
        super().__init__(first.field, first.message, first.line)
        self.args = ("; ".join(f"{e.field}: {e.message}" for e in self._errors),)

    @property
    def errors(self) -> list[SpecError]:
        return list(self._errors)


_T = TypeVar("_T")


class _Mistakes:
    """Collects SpecErrors so that one reading reports all of them; one error per field."""

    def __init__(self) -> None:
        self.errors: list[SpecError] = []

    def add(self, error: SpecError) -> None:
        for one in error.errors:
            if all(one.field != known.field for known in self.errors):
                self.errors.append(one)

    def attempt(self, work: Callable[..., _T], *args: Any, **kwargs: Any) -> _T | None:
        try:
            return work(*args, **kwargs)
        except SpecError as exc:
            self.add(exc)
            return None

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise SpecErrors(self.errors)


def max_problem_bytes() -> int:
    """The most device memory one size case of a problem may ask for (buffers and temps together).

    Read from KERNELLAB_MAX_PROBLEM_BYTES on every call, as a byte count or with a unit ("64GiB")."""
    raw = os.environ.get(MAX_PROBLEM_BYTES_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_MAX_PROBLEM_BYTES
    match = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", raw.replace("_", ""))
    if not match or match.group(2).upper() not in _BYTE_UNITS or int(match.group(1)) <= 0:
        raise ValueError(f"{MAX_PROBLEM_BYTES_VARIABLE} must be a positive number of bytes such as "
                         f"68719476736 or 64GiB, not {raw!r}.")
    return int(match.group(1)) * _BYTE_UNITS[match.group(2).upper()]


def describe_bytes(count: int) -> str:
    """'1099511627776 bytes (1 TiB)'; enormous counts as a power of ten."""
    if count >= 10**30:
        return f"about 10^{len(str(count)) - 1} bytes"
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= size:
            return f"{count} bytes ({count / size:.3g} {unit})"
    return f"{count} bytes"


@dataclass(frozen=True)
class ArgSpec:
    name: str
    role: str
    dtype: str
    shape: tuple[Expression, ...] = ()
    init: str | None = None
    value: Expression | None = None      # scalars only

    def numel(self, env: Mapping[str, Any]) -> int:
        count = 1
        for dim in self.shape:
            count *= dim.evaluate_int(env)
        return count

    def nbytes(self, env: Mapping[str, Any]) -> int:
        return self.numel(env) * DTYPES[self.dtype].itemsize

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "role": self.role, "dtype": self.dtype}
        if self.role == "scalar":
            out["value"] = self.value.text if self.value else None
        else:
            out["shape"] = [d.text for d in self.shape]
        if self.init:
            out["init"] = self.init
        return out


@dataclass(frozen=True)
class KernelLaunch:
    kernel: str
    grid: tuple[Expression, ...]
    block: tuple[Expression, ...]
    shared: Expression
    args: tuple[str, ...]
    when: Expression | None = None     # family steps only: the step belongs to variants where it holds

    def resolve(self, env: Mapping[str, Any]) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        grid = tuple(e.evaluate_int(env) for e in self.grid) + (1,) * (3 - len(self.grid))
        block = tuple(e.evaluate_int(env) for e in self.block) + (1,) * (3 - len(self.block))
        return grid, block, self.shared.evaluate_int(env)   # type: ignore[return-value]

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "grid": [e.text for e in self.grid],
                "block": [e.text for e in self.block], "shared": self.shared.text,
                "args": list(self.args)}


@dataclass(frozen=True)
class MemsetStep:
    arg: str
    value: float = 0
    when: Expression | None = None

    def to_dict(self) -> dict:
        return {"memset": self.arg, "value": self.value}


LaunchStep = KernelLaunch | MemsetStep


@dataclass(frozen=True)
class SizeCase:
    name: str
    sizes: Mapping[str, int]


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float


class Reference(ABC):
    """What the candidate's outputs are compared with and timed against."""

    kind: str

    @abstractmethod
    def describe(self) -> str: ...


@dataclass(frozen=True)
class CudaReference(Reference):
    source: str
    launch: tuple[LaunchStep, ...]
    compile_options: tuple[str, ...] = ()
    kind: str = "cuda"

    def describe(self) -> str:
        return f"CUDA reference with {len(self.launch)} step(s)"


@dataclass(frozen=True)
class PytorchReference(Reference):
    """A KernelBench program (`Model`, `get_inputs`, `get_init_inputs`): only a GPU worker executes it."""

    source: str
    constants: Mapping[str, Any] = field(default_factory=dict)
    forward_params: tuple[str, ...] = ()
    kind: str = "pytorch"

    def describe(self) -> str:
        return f"PyTorch reference (KernelBench Model.forward({', '.join(self.forward_params)}))"


# KernelBench's own correctness check: torch.allclose(out, ref, atol=1e-2, rtol=1e-2).
KERNELBENCH_TOLERANCE = Tolerance(rtol=1e-2, atol=1e-2)


@dataclass(frozen=True)
class Roofline:
    flops: Expression | None = None
    bytes: Expression | None = None


@dataclass(frozen=True)
class Family:
    source: str
    knobs: Mapping[str, tuple]
    constraints: tuple[Expression, ...]
    temps: tuple[ArgSpec, ...]
    launch: tuple[LaunchStep, ...]
    compile_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vendor:
    kind: str
    inputs: tuple[str, ...]
    output: str


@dataclass(frozen=True)
class Problem:
    name: str
    title: str
    description: str
    args: tuple[ArgSpec, ...]
    sizes: tuple[SizeCase, ...]
    reference: Reference
    tolerance: Mapping[str, Tolerance]
    roofline: Roofline
    family: Family | None = None
    vendor: Vendor | None = None
    folder: Path | None = field(default=None, compare=False)
    spec_hash: str = ""

    @property
    def size_names(self) -> frozenset[str]:
        return frozenset(self.sizes[0].sizes)

    @property
    def default_case(self) -> SizeCase:
        return self.sizes[0]

    def arg(self, name: str) -> ArgSpec:
        for arg in self.args:
            if arg.name == name:
                return arg
        raise KeyError(name)

    def args_with_role(self, *roles: str) -> list[ArgSpec]:
        return [a for a in self.args if a.role in roles]

    def tolerance_for(self, dtype: str) -> Tolerance:
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        rtol, atol = DEFAULT_TOLERANCE[dtype]
        return Tolerance(rtol, atol)

    def case(self, name: str) -> SizeCase:
        for case in self.sizes:
            if case.name == name:
                return case
        raise KeyError(name)


def read_source_file(path: Path, field: str) -> str:
    """A problem folder's text file; one that is not UTF-8 is a SpecError naming the file and the first bad byte.
    utf-8-sig: a file some editor saved with a byte order mark reads as what it says."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(field, f"{path.name} is not UTF-8 text: byte 0x{data[exc.start]:02x} on line {line} "
                               "(save it as UTF-8)") from None


def load_problem(folder: str | Path) -> Problem:
    """Read `problem.toml`, its reference source and (if any) its family template from `folder`."""
    folder = Path(folder)
    toml_path = folder / "problem.toml"
    if not toml_path.is_file():
        raise SpecError("problem.toml", f"no problem.toml in {folder}")
    toml_text = read_source_file(toml_path, "problem.toml")
    table = _read_toml(toml_text)
    reference_name = table.get("problem", {}).get("reference", "reference.cu")
    reference_path = folder / str(reference_name)
    if not reference_path.is_file():
        raise SpecError("problem.reference", f"the reference file '{reference_name}' is not in {folder}")
    family_source = None
    family = table.get("family")
    if isinstance(family, dict) and isinstance(family.get("source"), str):
        family_path = folder / family["source"]
        if not family_path.is_file():
            raise SpecError("family.source", f"the template '{family['source']}' is not in {folder}")
        family_source = read_source_file(family_path, "family.source")
    problem = parse_problem(toml_text, read_source_file(reference_path, "problem.reference"), family_source)
    object.__setattr__(problem, "folder", folder)
    return problem


def _read_toml(toml_text: str) -> dict:
    try:
        # a byte order mark some editors write first is no TOML statement, but no mistake of the author's
        return tomllib.loads(toml_text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("problem.toml", f"not valid TOML ({exc})",
                        syntax_error_line(str(exc), toml_text)) from None


def parse_problem(toml_text: str, reference_source: str, family_source: str | None = None) -> Problem:
    """Read a spec, reporting every mistake at once: one SpecError, or SpecErrors for several, each
    with the TOML line it is on."""
    table = _read_toml(toml_text)
    mistakes = _Mistakes()
    head = table.get("problem")
    if isinstance(head, dict) and head.get("kind") == "pytorch":
        return _parse_pytorch_problem(table, toml_text, reference_source)
    try:
        problem = _parse_problem(table, toml_text, reference_source, family_source, mistakes)
    except SpecError as exc:
        mistakes.add(exc)
    positions = toml_positions(toml_text)
    for error in mistakes.errors:
        if error.line is None:
            error.line = field_line(toml_text, error.field, positions)
    mistakes.raise_if_any()
    return problem


def _parse_problem(table: dict, toml_text: str, reference_source: str, family_source: str | None,
                   mistakes: _Mistakes) -> Problem:
    for unknown in sorted(set(table) - {"problem", "sizes", "args", "launch", "tolerance", "roofline", "family",
                                        "vendor"}):
        mistakes.add(SpecError(unknown, "unknown table (known: problem, sizes, args, launch, "
                                        "tolerance, roofline, family, vendor)"))
    head = mistakes.attempt(_table, table, "problem", required=True) or {}
    name = mistakes.attempt(_problem_name, head) if head else None
    if not reference_source.strip():
        mistakes.add(SpecError("problem.reference", "the reference source is empty"))

    sizes = mistakes.attempt(lambda: _parse_sizes(_table(table, "sizes", required=True)))
    size_names = frozenset(sizes[0].sizes) if sizes else _written_size_names(table.get("sizes"))
    args = parse_args(table.get("args"), "args", size_names, allow_temps=True, mistakes=mistakes)
    written_args = _written_arg_names(table.get("args"))
    collisions = {a.name for a in args} & size_names
    if collisions:
        mistakes.add(SpecError("args", f"'{sorted(collisions)[0]}' is both an argument and a size"))
    if isinstance(table.get("args"), list) and not any(
            isinstance(item, dict) and item.get("role") in ("output", "inout") for item in table["args"]):
        mistakes.add(SpecError("args", "no argument has role 'output' or 'inout': nothing to compare"))
    errors_before_launch = len(mistakes.errors)
    launch = parse_launch(table.get("launch"), "launch", size_names, {a.name: a for a in args},
                          mistakes=mistakes, written_args=written_args)
    launch_complete = len(mistakes.errors) == errors_before_launch
    check_launch_signatures(launch, "launch", {a.name: a for a in args}, reference_source, "reference.cu",
                            mistakes=mistakes)
    for case in sizes or []:
        mistakes.attempt(_check_evaluates, args, launch if launch_complete else [], case, "")
    tolerance = mistakes.attempt(_parse_tolerance, table.get("tolerance", {}))
    roofline = mistakes.attempt(_parse_roofline, table.get("roofline", {}), size_names, sizes or [])
    family = mistakes.attempt(_parse_family, table.get("family"), family_source, size_names, args, sizes or [],
                              mistakes, written_args)
    vendor = mistakes.attempt(_parse_vendor, table.get("vendor"), args, sizes or []) \
        if len(args) == len(written_args) else None
    options = mistakes.attempt(_compile_options, head.get("compile_options", []), "problem.compile_options")
    mistakes.raise_if_any()
    digest = hashlib.sha256("\0".join([toml_text, reference_source, family_source or ""]).encode())
    return Problem(
        name=name,
        title=str(head.get("title", name)),
        description=str(head.get("description", "")),
        args=tuple(args),
        sizes=tuple(sizes),
        reference=CudaReference(source=reference_source, launch=tuple(launch),
                                compile_options=tuple(options)),
        tolerance=tolerance,
        roofline=roofline,
        family=family,
        vendor=vendor,
        spec_hash=digest.hexdigest(),
    )


def reference_kind(toml_text: str) -> str:
    """"pytorch" when the spec says `[problem] kind = "pytorch"`, else "cuda" (also for a spec that does not read)."""
    try:
        head = tomllib.loads(toml_text.removeprefix("\ufeff")).get("problem")
    except (tomllib.TOMLDecodeError, ValueError):
        return "cuda"
    return "pytorch" if isinstance(head, dict) and head.get("kind") == "pytorch" else "cuda"


def _parse_pytorch_problem(table: dict, toml_text: str, reference_source: str) -> Problem:
    """A problem whose reference is a KernelBench program; its sizes are the program's integer constants."""
    from .kernelbench import ProgramError, parse_program

    mistakes = _Mistakes()
    for unknown in sorted(set(table) - {"problem", "tolerance", "kernelbench"}):
        mistakes.add(SpecError(unknown, "unknown table for a pytorch problem (known: problem, tolerance, kernelbench)"))
    head = table["problem"]
    name = mistakes.attempt(_problem_name, head)
    program = None
    try:
        program = parse_program(reference_source)
    except ProgramError as exc:
        mistakes.add(SpecError("problem.reference", exc.message, None))
    tolerance = mistakes.attempt(_parse_tolerance, table.get("tolerance", {}))
    positions = toml_positions(toml_text)
    for error in mistakes.errors:
        if error.line is None and error.field != "problem.reference":
            error.line = field_line(toml_text, error.field, positions)
    mistakes.raise_if_any()
    digest = hashlib.sha256("\0".join([toml_text, reference_source]).encode())
    return Problem(
        name=name,
        title=str(head.get("title", name)),
        description=str(head.get("description", "")),
        args=(),
        sizes=(SizeCase("default", dict(program.sizes)),),
        reference=PytorchReference(source=reference_source, constants=dict(program.constants),
                                   forward_params=program.forward_params),
        tolerance={"float32": KERNELBENCH_TOLERANCE, **tolerance},
        roofline=Roofline(),
        spec_hash=digest.hexdigest(),
    )


def _problem_name(head: Mapping) -> str:
    name = _string(head, "name", "problem.name")
    if not _SLUG.match(name):
        raise SpecError("problem.name", f"'{name}' must be a slug of a-z, 0-9 and _")
    return name


def _written_size_names(sizes: Any) -> frozenset[str]:
    """The size names a broken [sizes] table still names, so that the rest of the spec is checked."""
    if not isinstance(sizes, dict):
        return frozenset()
    return frozenset(name for case in sizes.values() if isinstance(case, dict) for name in case
                     if isinstance(name, str) and _IDENT.match(name))


def _written_arg_names(items: Any) -> frozenset[str]:
    if not isinstance(items, list):
        return frozenset()
    return frozenset(item["name"] for item in items if isinstance(item, dict) and isinstance(item.get("name"), str))


def check_launch_signatures(launch: Iterable[LaunchStep], where: str, args: Mapping[str, ArgSpec], source: str,
                            source_label: str, *, mistakes: _Mistakes | None = None) -> None:
    """Refuse kernel steps whose arguments do not fit the kernel's parameters in `source`: their
    number, pointer or value, dtype and constness (gpu_runner.signature). A kernel whose name is
    not in the source at all is refused; one the parser cannot find a definition of (made by a
    macro) is left to the compiler."""
    own = _Mistakes() if mistakes is None else mistakes
    signatures = kernel_signatures(source)
    # output name -> (step index, position, parameter) of each kernel parameter it is passed to
    writes: dict[str, list[tuple[int, int, Any]]] = {}
    code = None   # the source without comments and literals, made when first needed
    for i, kernel, kernel_args in _kernel_calls(launch):
        definitions = signatures.get(kernel)
        if not definitions:
            # A name in a comment or a string is no definition a macro could make: look in the code only.
            code = _code_only(source) if code is None else code
            if not re.search(rf"\b{re.escape(kernel)}\b", code):
                defined = ", ".join(signatures) or "none"
                own.add(SpecError(f"{where}[{i}].kernel", f"{source_label} defines no __global__ function "
                                                          f"'{kernel}' (it defines: {defined})"))
            continue
        for mismatch in launch_mismatches(kernel, kernel_args, args, definitions):
            field_name = f"{where}[{i}].args" + (f"[{mismatch.position}]" if mismatch.position is not None else "")
            own.add(SpecError(field_name, f"{mismatch.message} ({source_label})"))
        signature = fitting_signature(kernel_args, args, definitions)
        for position, name in enumerate(kernel_args if signature else ()):
            if name in args and args[name].role in ("output", "inout"):
                writes.setdefault(name, []).append((i, position, signature))
    # A step may read an output another step wrote, but some kernel must be able to write it.
    for name, uses in writes.items():
        if all(signature.parameters[position].const_pointee for _, position, signature in uses):
            i, position, signature = uses[0]
            param = signature.parameters[position]
            own.add(SpecError(f"{where}[{i}].args[{position}]",
                              f"the {args[name].role} '{name}' is passed only as const (parameter {position + 1} "
                              f"'{param.name}' of kernel {signature.name}, line {signature.line}, declared "
                              f"'{param.text}'), so no kernel can write it ({source_label})"))
    if mistakes is None:
        own.raise_if_any()


# A comment, or a string or character literal (escapes included); raw strings are rare in kernels.
_COMMENT_OR_LITERAL = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _code_only(source: str) -> str:
    """`source` with each comment and string or character literal replaced by a space (scanned from
    left to right, so `//` inside a string and a quote inside a comment are read as what they are)."""
    return _COMMENT_OR_LITERAL.sub(" ", source.replace("\\\n", ""))


class _IndexedSteps(list):
    """Launch steps that remember their index in the file (some may have been refused), and the
    kernel calls — (index, kernel, args) — of every step whose kernel and args are well written, so
    that a step with a bad grid is still checked against its kernel."""

    def __init__(self, pairs: Iterable[tuple[int, LaunchStep]], calls: list[tuple[int, str, tuple[str, ...]]]):
        super().__init__(step for _, step in pairs)
        self.calls = calls


def _kernel_calls(launch: Iterable[LaunchStep]) -> list[tuple[int, str, tuple[str, ...]]]:
    calls = getattr(launch, "calls", None)
    if calls is not None:
        return calls
    return [(i, step.kernel, step.args) for i, step in enumerate(launch) if isinstance(step, KernelLaunch)]


def _table(table: Mapping, key: str, *, required: bool = False) -> dict:
    value = table.get(key)
    if value is None:
        if required:
            raise SpecError(key, f"the [{key}] table is missing")
        return {}
    if not isinstance(value, dict):
        raise SpecError(key, f"must be a table, not {type(value).__name__}")
    return value


def _string(table: Mapping, key: str, where: str) -> str:
    value = table.get(key)
    if value is None:
        raise SpecError(where, "is missing")
    if not isinstance(value, str) or not value:
        raise SpecError(where, f"must be a non-empty string, not {value!r}")
    return value


def _compile_options(value: Any, where: str) -> list[str]:
    """A spec's compile_options, checked against the candidates' allow-list when the spec is read, so that a refusal
    names the spec's field and its line (every refused option listed; docs/spec.md "Compile options")."""
    from .candidate import check_compile_options  # (candidate.py imports this module)

    return check_compile_options(value, where)


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(where, f"must be a list of strings, not {value!r}")
    return list(value)


def _expr(value: Any, where: str, names: frozenset[str] | set[str], *, boolean: bool = False) -> Expression:
    try:
        return parse_expression(value, names, boolean=boolean)
    except ExpressionError as exc:
        raise SpecError(where, str(exc)) from None


def _condition(value: Any, where: str, names: frozenset[str] | set[str], knobs: Mapping[str, tuple],
               sizes: frozenset[str] | None = None) -> Expression:
    """A family constraint, or (with `sizes`, the size names) a launch step's `when`.

    A `when` is read once per variant, over its knobs: a variant has one launch plan for every size
    case (render_variant, Candidate.launch), so a `when` naming a size would pick the plan of one case
    for all of them. A string compared (== or !=) with a knob must be one of that knob's values, or
    the comparison never holds (a typo such as 'twopas' would silently drop a step)."""
    expression = _expr(value, where, names, boolean=True)
    named_sizes = sorted(expression.names & sizes) if sizes else []
    if named_sizes:
        plural = "s" if len(named_sizes) > 1 else ""
        raise SpecError(where, f"a step's when is read once per variant, over its knobs; it may not name the "
                               f"size{plural} {', '.join(named_sizes)} ('{expression.text}'): one launch plan "
                               "serves every size case, so write what the sizes must meet as a constraint instead "
                               "(a variant whose constraints fail in some case is left out)")
    _check_knob_strings(expression, where, knobs)
    return expression


def _check_knob_strings(expression: Expression, where: str, knobs: Mapping[str, tuple]) -> None:
    """Refuse `KNOB == 'text'` (or !=, either side) where 'text' is not one of the knob's values."""
    for node in ast.walk(expression.tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                continue
            for name, constant in ((left, right), (right, left)):
                if (isinstance(name, ast.Name) and name.id in knobs and isinstance(constant, ast.Constant)
                        and isinstance(constant.value, str) and constant.value not in knobs[name.id]):
                    values = ", ".join(repr(v) for v in knobs[name.id])
                    raise SpecError(where, f"compares the knob {name.id} with {constant.value!r}, which is not "
                                           f"one of its values ({values}), so the comparison never holds")


def _parse_sizes(table: dict) -> list[SizeCase]:
    if not table:
        raise SpecError("sizes", "needs at least one size case")
    cases = []
    names: set[str] | None = None
    for case_name, values in table.items():
        where = f"sizes.{case_name}"
        if not isinstance(values, dict) or not values:
            raise SpecError(where, "must be a table of size names to positive integers")
        for size, value in values.items():
            if not _IDENT.match(size):
                raise SpecError(f"{where}.{size}", "is not a valid size name")
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"{where}.{size}", f"must be a positive integer, not {value!r}")
        if names is None:
            names = set(values)
        elif set(values) != names:
            raise SpecError(where, f"names sizes {sorted(values)}, but the first case names {sorted(names)}")
        cases.append(SizeCase(case_name, dict(values)))
    return cases


def parse_args(items: Any, where: str, names: frozenset[str], *, allow_temps: bool,
               roles: tuple[str, ...] = ROLES, mistakes: _Mistakes | None = None) -> list[ArgSpec]:
    """The arguments that are well written; every mistake goes to `mistakes`, or is raised (all of
    them) when none is given."""
    own = _Mistakes() if mistakes is None else mistakes
    if items is None:
        own.add(SpecError(where, "is missing: declare the kernel arguments with [[args]]"))
    elif not isinstance(items, list):
        own.add(SpecError(where, "must be an array of tables ([[args]])"))
    args: list[ArgSpec] = []
    seen: set[str] = set()
    for i, item in enumerate(items if isinstance(items, list) else []):
        arg = own.attempt(_parse_arg, item, f"{where}[{i}]", names, seen, allow_temps, roles)
        if arg is not None:
            args.append(arg)
    if mistakes is None:
        own.raise_if_any()
    return args


def _parse_arg(item: Any, at: str, names: frozenset[str], seen: set[str], allow_temps: bool,
               roles: tuple[str, ...]) -> ArgSpec:
    if not isinstance(item, dict):
        raise SpecError(at, "must be a table")
    name = _string(item, "name", f"{at}.name")
    at = f"{at} ('{name}')"
    if not _IDENT.match(name):
        raise SpecError(f"{at}.name", "must be a C identifier")
    if name in seen:
        raise SpecError(f"{at}.name", "is declared twice")
    seen.add(name)
    role = item.get("role", "temp" if not allow_temps or roles == ("temp",) else None)
    if role not in roles:
        raise SpecError(f"{at}.role", f"must be one of {', '.join(roles)}, not {role!r}")
    dtype = item.get("dtype")
    if dtype not in DTYPES:
        raise SpecError(f"{at}.dtype", f"must be one of {', '.join(DTYPES)}, not {dtype!r}")
    extra = set(item) - {"name", "role", "dtype", "shape", "init", "value"}
    if extra:
        raise SpecError(f"{at}.{sorted(extra)[0]}", "unknown field")
    if role == "scalar":
        if "value" not in item:
            raise SpecError(f"{at}.value", "a scalar needs a value (an expression of sizes)")
        if "shape" in item:
            raise SpecError(f"{at}.shape", "a scalar has no shape")
        return ArgSpec(name, role, dtype, (), None, _expr(item["value"], f"{at}.value", names))
    if "value" in item:
        raise SpecError(f"{at}.value", "only scalars have a value")
    shape = item.get("shape")
    if not isinstance(shape, list) or not shape:
        raise SpecError(f"{at}.shape", "must be a non-empty list of expressions")
    dims = tuple(_expr(d, f"{at}.shape[{j}]", names) for j, d in enumerate(shape))
    init = item.get("init")
    if init is not None and role not in ("input", "inout"):
        raise SpecError(f"{at}.init", "only inputs are initialised")
    if role in ("input", "inout"):
        init = init or ("normal" if DTYPES[dtype].is_float else "randint:0:100")
        if not isinstance(init, str) or not _INIT.match(init):
            raise SpecError(f"{at}.init", "must be normal, uniform, uniform:LO:HI, "
                                          f"randint:LO:HI, ones or zeros, not {init!r}")
        _check_init_range(init, f"{at}.init")
    return ArgSpec(name, role, dtype, dims, init, None)


def _check_init_range(init: str, at: str) -> None:
    """`randint:LO:HI` and `uniform:LO:HI` draw from LO to HI: LO must be a number no larger than HI
    (randint:5:1 would take its values modulo HI - LO + 1, zero or negative, on the GPU)."""
    kind, _, bounds = init.partition(":")
    if not bounds:
        return
    low_text, high_text = bounds.split(":")
    try:
        low, high = (int(low_text), int(high_text)) if kind == "randint" else (float(low_text), float(high_text))
    except ValueError:
        raise SpecError(at, f"{init!r}: LO and HI must be numbers") from None
    if kind == "uniform" and not (math.isfinite(low) and math.isfinite(high)):
        raise SpecError(at, f"{init!r}: LO and HI must be finite numbers")
    if low > high:
        raise SpecError(at, f"{init!r} draws from LO = {low_text} to HI = {high_text}, but LO is larger than HI; "
                            f"write {kind}:{high_text}:{low_text}")


def parse_launch(items: Any, where: str, names: frozenset[str] | set[str],
                 args: Mapping[str, ArgSpec], when_names: frozenset[str] | set[str] | None = None, *,
                 mistakes: _Mistakes | None = None, written_args: frozenset[str] = frozenset(),
                 knobs: Mapping[str, tuple] | None = None, sizes: frozenset[str] = frozenset()
                 ) -> list[LaunchStep]:
    """Launch steps; `when_names` (family plans only) allows a `when` condition over those names.
    A `when` may not name one of `sizes` (see _condition), and compares a knob of `knobs` with a
    string only where the string is one of its values.

    Mistakes go to `mistakes` (the well-written steps are returned, remembering their index) or are
    all raised. A name in `written_args` is declared but refused, so naming it is no new mistake."""
    own = _Mistakes() if mistakes is None else mistakes
    pairs: list[tuple[int, LaunchStep]] = []
    calls: list[tuple[int, str, tuple[str, ...]]] = []
    if items is None:
        own.add(SpecError(where, "is missing: give at least one launch step"))
    elif not isinstance(items, list) or not items:
        own.add(SpecError(where, "must be a non-empty array of tables"))
    else:
        for i, item in enumerate(items):
            step = own.attempt(_parse_step, item, f"{where}[{i}]", names, args, when_names, written_args,
                               lambda kernel, kernel_args, i=i: calls.append((i, kernel, kernel_args)),
                               knobs or {}, sizes)
            if step is not None:
                pairs.append((i, step))
    if mistakes is None:
        own.raise_if_any()
    return _IndexedSteps(pairs, calls)


def _parse_step(item: Any, at: str, names: frozenset[str] | set[str], args: Mapping[str, ArgSpec],
                when_names: frozenset[str] | set[str] | None, written_args: frozenset[str],
                call_found: Callable[[str, tuple[str, ...]], None], knobs: Mapping[str, tuple] = {},
                sizes: frozenset[str] = frozenset()) -> LaunchStep:
    if not isinstance(item, dict):
        raise SpecError(at, "must be a table")
    # Every mistake of the step is reported, an unknown field among them (it used to hide the rest).
    step_mistakes = _Mistakes()
    when = None
    if "when" in item and when_names is not None:
        when = step_mistakes.attempt(_condition, item["when"], f"{at}.when", when_names, knobs, sizes)
    if "memset" in item:
        extra = set(item) - {"memset", "value"} - ({"when"} if when_names is not None else set())
        if extra:
            step_mistakes.add(SpecError(f"{at}.{sorted(extra)[0]}", "a memset step has only memset and value"))
        target = item["memset"]
        if target not in args:
            if target in written_args:
                step_mistakes.raise_if_any()
                raise _Skipped()
            step_mistakes.add(SpecError(f"{at}.memset", f"unknown argument {target!r}"))
        elif args[target].role in ("input", "scalar"):
            step_mistakes.add(SpecError(f"{at}.memset", f"'{target}' is an {args[target].role}; "
                                                        "only outputs and temporaries may be set"))
        value = item.get("value", 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            step_mistakes.add(SpecError(f"{at}.value", f"must be a number, not {value!r}"))
        step_mistakes.raise_if_any()
        return MemsetStep(target, value, when)
    extra = set(item) - {"kernel", "grid", "block", "shared", "args"} - (
        {"when"} if when_names is not None else set())
    for unknown in sorted(extra):
        step_mistakes.add(SpecError(f"{at}.{unknown}", "unknown field (known: kernel, grid, block, shared, args"
                                                       + (", when)" if when_names is not None else ")")))
    kernel = step_mistakes.attempt(_kernel_name, item, at)
    dims = {key: step_mistakes.attempt(_dims, item.get(key), f"{at}.{key}", names) for key in ("grid", "block")}
    shared = step_mistakes.attempt(_expr, item.get("shared", "0"), f"{at}.shared", names)
    kernel_args = step_mistakes.attempt(_kernel_args, item.get("args"), f"{at}.args", args, written_args)
    if kernel is not None and kernel_args is not None:
        call_found(kernel, kernel_args)
    step_mistakes.raise_if_any()
    return KernelLaunch(kernel, dims["grid"], dims["block"], shared, kernel_args, when)


def _kernel_name(item: Mapping, at: str) -> str:
    kernel = _string(item, "kernel", f"{at}.kernel")
    if not _IDENT.match(kernel):
        raise SpecError(f"{at}.kernel", f"'{kernel}' is not a C identifier")
    return kernel


def _dims(value: Any, at: str, names: frozenset[str] | set[str]) -> tuple[Expression, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise SpecError(at, "must be a list of 1 to 3 expressions")
    return tuple(_expr(v, f"{at}[{j}]", names) for j, v in enumerate(value))


def _kernel_args(value: Any, at: str, args: Mapping[str, ArgSpec], written_args: frozenset[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise SpecError(at, "must be a list of argument names")
    for j, name in enumerate(value):
        if name not in args and name not in written_args:
            known = ", ".join(args) or "none"
            raise SpecError(f"{at}[{j}]", f"unknown argument '{name}' (known: {known})")
    return tuple(value)


class _Skipped(SpecError):
    """A step that names a refused argument: already reported, so it adds no error of its own."""

    def __init__(self) -> None:
        super().__init__("", "")

    @property
    def errors(self) -> list[SpecError]:
        return []


def _check_evaluates(args: list[ArgSpec], launch: list[LaunchStep], case: SizeCase, prefix: str,
                     extra: Mapping[str, Any] | None = None) -> None:
    env = {**case.sizes, **(extra or {})}
    cap = max_problem_bytes()
    buffer_bytes: dict[str, int] = {}
    for i, arg in enumerate(args):
        try:
            if arg.role == "scalar":
                value = arg.value.evaluate(env)  # type: ignore[union-attr]
                _check_scalar_range(arg, value, f"{prefix}args[{i}] ('{arg.name}').value", case)
            elif arg.numel(env) <= 0:
                raise SpecError(f"{prefix}args[{i}] ('{arg.name}').shape",
                                f"has no elements for size case '{case.name}'")
            else:
                buffer_bytes[arg.name] = arg.nbytes(env)
        except ExpressionError as exc:
            raise SpecError(f"{prefix}args[{i}] ('{arg.name}')", f"{exc} (size case '{case.name}')") from None
        if buffer_bytes.get(arg.name, 0) > cap:
            raise SpecError(f"{prefix}args[{i}] ('{arg.name}').shape",
                            f"argument '{arg.name}' needs {describe_bytes(buffer_bytes[arg.name])} for size case "
                            f"'{case.name}', more than the per-problem memory cap of {describe_bytes(cap)} "
                            f"({MAX_PROBLEM_BYTES_VARIABLE})")
    if sum(buffer_bytes.values()) > cap:
        largest = max(buffer_bytes, key=buffer_bytes.__getitem__)
        raise SpecError(f"{prefix}args", f"the arguments need {describe_bytes(sum(buffer_bytes.values()))} together "
                                         f"for size case '{case.name}' (the largest, '{largest}', "
                                         f"{describe_bytes(buffer_bytes[largest])}), more than the per-problem "
                                         f"memory cap of {describe_bytes(cap)} ({MAX_PROBLEM_BYTES_VARIABLE})")
    for i, step in enumerate(launch):
        if isinstance(step, KernelLaunch):
            try:
                grid, block, shared = step.resolve(env)
            except ExpressionError as exc:
                raise SpecError(f"{prefix}launch[{i}]", f"{exc} (size case '{case.name}')") from None
            if min(grid) <= 0 or min(block) <= 0 or shared < 0:
                raise SpecError(f"{prefix}launch[{i}]", f"gives grid {grid}, block {block}, shared "
                                                        f"{shared} for size case '{case.name}'")
            check_launch_limits(grid, block, shared, f"{prefix}launch[{i}]", case.name)


def check_launch_limits(grid: tuple[int, ...], block: tuple[int, ...], shared: int, at: str, case: str) -> None:
    """Refuse a resolved launch that CUDA would refuse on the H100 and H200, naming the limit broken."""
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise SpecError(f"{at}.block", f"gives block {block}, {threads} threads per block, for size case '{case}'; "
                                       f"the limit is {MAX_THREADS_PER_BLOCK} threads per block on {GPU_LIMITS_NAME}")
    for axis, value, limit in zip(_AXES, block, MAX_BLOCK_DIMS):
        if value > limit:
            raise SpecError(f"{at}.block", f"gives block {axis} = {value} for size case '{case}'; the limit for "
                                           f"block {axis} is {limit} on {GPU_LIMITS_NAME}")
    for axis, value, limit in zip(_AXES, grid, MAX_GRID_DIMS):
        if value > limit:
            raise SpecError(f"{at}.grid", f"gives grid {axis} = {value} for size case '{case}'; the limit for "
                                          f"grid {axis} is {limit} on {GPU_LIMITS_NAME}")
    if shared > MAX_DYNAMIC_SHARED_BYTES:
        raise SpecError(f"{at}.shared", f"asks for {describe_bytes(shared)} of dynamic shared memory for size case "
                                        f"'{case}'; the limit is {describe_bytes(MAX_DYNAMIC_SHARED_BYTES)} per "
                                        f"block on {GPU_LIMITS_NAME}")


def _check_scalar_range(arg: ArgSpec, value: Any, at: str, case: SizeCase) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    low, high = SCALAR_RANGES.get(arg.dtype, (-math.inf, math.inf))
    if not low <= value <= high:
        raise SpecError(at, f"gives {_number(value)} for size case '{case.name}', outside the range of the "
                            f"{arg.dtype} scalar ({_number(low)} to {_number(high)})")


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _parse_tolerance(table: Any) -> dict[str, Tolerance]:
    if not isinstance(table, dict):
        raise SpecError("tolerance", "must be a table of dtype = { rtol, atol }")
    mistakes = _Mistakes()   # every entry and both of its numbers are checked, each mistake reported
    out = {}
    for dtype, entry in table.items():
        at = f"tolerance.{dtype}"
        if dtype not in DTYPES:
            mistakes.add(SpecError(at, f"'{dtype}' is not a dtype"))
            continue
        if not isinstance(entry, dict) or set(entry) - {"rtol", "atol"}:
            mistakes.add(SpecError(at, "must be { rtol = number, atol = number }"))
            if not isinstance(entry, dict):
                continue
        default_r, default_a = DEFAULT_TOLERANCE[dtype]
        values = {}
        for key, default in (("rtol", default_r), ("atol", default_a)):
            value = entry.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                mistakes.add(SpecError(f"{at}.{key}", f"must be a non-negative number, not {value!r}"))
                continue
            values[key] = float(value)
        if len(values) == 2:
            out[dtype] = Tolerance(values["rtol"], values["atol"])
    mistakes.raise_if_any()
    return out


def _parse_roofline(table: Any, names: frozenset[str], sizes: list[SizeCase]) -> Roofline:
    if not isinstance(table, dict):
        raise SpecError("roofline", "must be a table with flops and/or bytes")
    extra = set(table) - {"flops", "bytes"}
    if extra:
        raise SpecError(f"roofline.{sorted(extra)[0]}", "unknown field (known: flops, bytes)")
    exprs = {k: _expr(table[k], f"roofline.{k}", names) for k in ("flops", "bytes") if k in table}
    for key, expr in exprs.items():
        for case in sizes:
            try:
                value = expr.evaluate(case.sizes)
            except ExpressionError as exc:
                raise SpecError(f"roofline.{key}", str(exc)) from None
            if isinstance(value, str) or value < 0:
                raise SpecError(f"roofline.{key}", f"gives {value!r} for size case '{case.name}'")
    return Roofline(exprs.get("flops"), exprs.get("bytes"))


def _parse_family(table: Any, source: str | None, size_names: frozenset[str], args: list[ArgSpec],
                  sizes: list[SizeCase], mistakes: _Mistakes, written_args: frozenset[str]) -> Family | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError("family", "must be a table")
    errors_before = len(mistakes.errors)
    # an unknown field is one mistake among the others, not a reason to read no further
    for unknown in sorted(set(table) - {"source", "knobs", "constraints", "temps", "launch", "compile_options"}):
        mistakes.add(SpecError(f"family.{unknown}", "unknown field (known: source, knobs, constraints, temps, "
                                                    "launch, compile_options)"))
    _string(table, "source", "family.source")
    if source is None:
        raise SpecError("family.source", f"the template '{table['source']}' was not given")
    knobs_table = table.get("knobs")
    if not isinstance(knobs_table, dict) or not knobs_table:
        raise SpecError("family.knobs", "must be a table of knob names to lists of values")
    knobs: dict[str, tuple] = {}
    for knob, values in knobs_table.items():
        checked = mistakes.attempt(_parse_knob, knob, values, size_names, args)
        if checked is not None:
            knobs[knob] = checked
    names = size_names | set(knobs_table)
    constraints = tuple(mistakes.attempt(_condition, c, f"family.constraints[{i}]", names, knobs)
                        for i, c in enumerate(mistakes.attempt(_string_list, table.get("constraints", []),
                                                               "family.constraints") or []))
    temps = parse_args(table.get("temps", []), "family.temps", frozenset(names), allow_temps=True,
                       roles=("temp",), mistakes=mistakes)
    clash = {t.name for t in temps} & {a.name for a in args}
    if clash:
        mistakes.add(SpecError("family.temps", f"'{sorted(clash)[0]}' is already an argument"))
    all_args = {a.name: a for a in args} | {t.name: t for t in temps}
    launch = parse_launch(table.get("launch"), "family.launch", names, all_args, when_names=names,
                          mistakes=mistakes, written_args=written_args | _written_arg_names(table.get("temps")),
                          knobs=knobs, sizes=size_names)
    check_launch_signatures(launch, "family.launch", all_args, source, "family.cu", mistakes=mistakes)
    options = mistakes.attempt(_compile_options, table.get("compile_options", []), "family.compile_options")
    if len(mistakes.errors) > errors_before:
        return None
    return Family(source=source, knobs=knobs, constraints=constraints, temps=tuple(temps),
                  launch=tuple(launch), compile_options=tuple(options))


def _parse_knob(knob: str, values: Any, size_names: frozenset[str], args: list[ArgSpec]) -> tuple:
    at = f"family.knobs.{knob}"
    if not _IDENT.match(knob):
        raise SpecError(at, "is not a C identifier")
    if knob in size_names or knob in {a.name for a in args}:
        raise SpecError(at, "has the name of a size or an argument")
    if not isinstance(values, list) or not values:
        raise SpecError(at, "must be a non-empty list of values")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise SpecError(at, f"{value!r} is not an integer, number or string")
        if isinstance(value, str) and not _KNOB_STRING.match(value):
            raise SpecError(at, f"the string {value!r} must be letters, digits and _ only")
    if len(set(values)) != len(values):
        raise SpecError(at, "lists a value twice")
    return tuple(values)


# What each [vendor] kind computes (gpu_runner.vendor): the dtypes it takes (inputs, then output; None: any)
# and the rule its shapes follow. A baseline given other dtypes or shapes computes something else than
# the reference (or fails on the GPU), so the spec is refused when it is read.
_VENDOR_DTYPES: dict[str, tuple[str | None, ...]] = {
    "cublas_sgemm": ("float32", "float32", "float32"),
    "cublas_hgemm": ("float16", "float16", "float16"),
    "cublas_sgemv": ("float32", "float32", "float32"),
    "cupy_dot": ("float32", "float32", "float32"),
}
_VENDOR_SHAPES = {
    "cublas_sgemm": "C = A @ B of row-major matrices: A [M, K], B [K, N], C [M, N]",
    "cublas_hgemm": "C = A @ B of row-major matrices: A [M, K], B [K, N], C [M, N]",
    "cublas_sgemv": "y = A @ x: A [M, K], x [K], y [M]",
    "cupy_dot": "out[0] = x . y: x [N], y [N], one output element",
    "cupy_sum": "out[0] = sum(x): one output element",
    "cupy_transpose": "out = x.T: the output's shape is the input's reversed",
    "cupy_softmax": "a softmax over the last axis: the output's shape is the input's",
}


def _vendor_shapes_fit(kind: str, shapes: list[tuple[int, ...]]) -> bool:
    """Whether the inputs' and the output's shapes (last) in one size case fit `kind`."""
    *ins, out = shapes
    if kind in ("cublas_sgemm", "cublas_hgemm"):
        a, b = ins
        return len(a) == len(b) == len(out) == 2 and a[1] == b[0] and out == (a[0], b[1])
    if kind == "cublas_sgemv":
        a, x = ins
        return len(a) == 2 and len(x) == len(out) == 1 and a[1] == x[0] and out[0] == a[0]
    if kind == "cupy_dot":
        x, y = ins
        return len(x) == len(y) == 1 and x == y and math.prod(out) == 1
    if kind == "cupy_sum":
        return math.prod(out) == 1
    if kind == "cupy_transpose":
        return out == ins[0][::-1]
    return out == ins[0]   # cupy_softmax


def _check_vendor_args(kind: str, inputs: list[str], output: str, by_name: Mapping[str, ArgSpec],
                       sizes: list[SizeCase]) -> None:
    mistakes = _Mistakes()
    wanted = _VENDOR_DTYPES.get(kind)
    if wanted:
        wrong = [f"'{name}' is {by_name[name].dtype}" for name, dtype in zip(inputs, wanted)
                 if by_name[name].dtype != dtype]
        if wrong:
            hint = " (cublas_hgemm takes float16 ones)" if kind == "cublas_sgemm" else \
                " (cublas_sgemm takes float32 ones)" if kind == "cublas_hgemm" else ""
            mistakes.add(SpecError("vendor.inputs", f"{kind} takes {wanted[0]} inputs{hint}, but "
                                                    f"{' and '.join(wrong)}"))
        if by_name[output].dtype != wanted[-1]:
            mistakes.add(SpecError("vendor.output", f"{kind} writes a {wanted[-1]} output, but '{output}' is "
                                                    f"{by_name[output].dtype}"))
    if kind == "cupy_softmax" and not all(DTYPES[by_name[n].dtype].is_float for n in (*inputs, output)):
        mistakes.add(SpecError("vendor.kind", "cupy_softmax computes in floating point: its input and output "
                                              "must have a float dtype"))
    names = [*inputs, output]
    for case in sizes:
        try:
            shapes = [tuple(d.evaluate_int(case.sizes) for d in by_name[n].shape) for n in names]
        except ExpressionError:
            continue   # the argument's own check names it
        if not _vendor_shapes_fit(kind, shapes):
            given = ", ".join(f"{n} {list(shape)}" for n, shape in zip(names, shapes))
            mistakes.add(SpecError("vendor.kind", f"{kind} computes {_VENDOR_SHAPES[kind]}; in size case "
                                                  f"'{case.name}' the spec gives {given}"))
            break
    mistakes.raise_if_any()


def _parse_vendor(table: Any, args: list[ArgSpec], sizes: list[SizeCase] = ()) -> Vendor | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SpecError("vendor", "must be a table")
    kind = table.get("kind")
    if kind == "none":
        return None
    if kind not in VENDOR_KINDS:
        raise SpecError("vendor.kind", f"must be one of {', '.join(VENDOR_KINDS)} or none, not {kind!r}")
    by_name = {a.name: a for a in args}
    inputs = table.get("inputs", [a.name for a in args if a.role == "input"])
    output = table.get("output", next((a.name for a in args if a.role in ("output", "inout")), None))
    inputs = _string_list(inputs, "vendor.inputs")
    for name in inputs:
        if name not in by_name or by_name[name].role not in ("input", "inout"):
            raise SpecError("vendor.inputs", f"'{name}' is not an input")
    if output not in by_name or by_name[output].role not in ("output", "inout"):
        raise SpecError("vendor.output", f"{output!r} is not an output")
    needed = {"cublas_sgemm": 2, "cublas_hgemm": 2, "cublas_sgemv": 2, "cupy_sum": 1, "cupy_transpose": 1,
              "cupy_softmax": 1, "cupy_dot": 2}[kind]
    if len(inputs) != needed:
        raise SpecError("vendor.inputs", f"{kind} takes {needed} input(s), the spec gives {len(inputs)}")
    _check_vendor_args(kind, inputs, output, by_name, list(sizes))
    return Vendor(kind=kind, inputs=tuple(inputs), output=output)
