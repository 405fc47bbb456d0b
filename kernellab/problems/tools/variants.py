"""Read a bundled problem's family, enumerate its variants and render their sources.

A small stand-in for `gpu_runner.spec` used by the bundled-problem checks. It runs with the
standard library and `klexpr` (the project's one expression language, itself standard library
only) so that it also runs on the device machine, where Django and the rest of the project are
absent. It follows docs/contracts.md, including the section "Bundled problems: extensions to the
spec".
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

try:
    from klexpr import ExpressionError, evaluate, evaluate_int, parse_expression
except ImportError:  # run as a script on the device machine, where the project is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from klexpr import ExpressionError, evaluate, evaluate_int, parse_expression

PROBLEMS_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Variant:
    problem: str
    knobs: dict
    source: str
    launch: list
    temps: list

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.knobs.items())

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclass
class Problem:
    folder: Path
    spec: dict
    family_source: str = field(default="")

    @property
    def name(self) -> str:
        return self.spec["problem"]["name"]

    @property
    def sizes(self) -> dict[str, dict[str, int]]:
        return self.spec["sizes"]

    @property
    def family(self) -> dict:
        return self.spec.get("family", {})

    def reference_source(self) -> str:
        return (self.folder / self.spec["problem"]["reference"]).read_text()

    def knob_space(self) -> list[dict]:
        """All knob points that satisfy the constraints in every size case, in declaration order.

        Backtracking: a constraint is checked as soon as every knob it names is bound, so that
        cross products of millions of points are pruned early."""
        knobs = self.family["knobs"]
        names = list(knobs)
        cases = list(self.sizes.values())
        checks: list[list] = [[] for _ in names]
        for text in self.family.get("constraints", []):
            constraint = parse_expression(text, boolean=True)
            unknown = constraint.names - set(names) - set(cases[0])
            if unknown:
                raise ExpressionError(f"constraint {text!r} names {sorted(unknown)}: not knobs or sizes")
            knob_names = constraint.names & set(names)
            last = max(names.index(n) for n in knob_names) if knob_names else 0
            checks[last].append((constraint, bool(constraint.names - knob_names)))
        valid: list[dict] = []
        point: dict = {}

        def bind(i: int) -> None:
            if i == len(names):
                valid.append(dict(point))
                return
            for value in knobs[names[i]]:
                point[names[i]] = value
                if all(_holds(constraint, point, cases if sized else [{}]) for constraint, sized in checks[i]):
                    bind(i + 1)
            del point[names[i]]

        bind(0)
        return valid

    def nvcc_flags(self) -> list[str]:
        """The family's compile options as nvcc flags: its -arch (sm_90 unless it asks for sm_90a) and,
        where it uses CuTe/CUTLASS, the headers of the nvidia-cutlass wheel."""
        options = list(self.family.get("compile_options", []))
        arch = next((o for o in options if o.startswith("-arch=")), "-arch=sm_90")
        flags = [arch] + [o for o in options if not o.startswith("-arch=")]
        if re.search(r"#include\s*<(?:cute|cutlass)/", self.family_source or ""):
            flags.append(f"-I{cutlass_include_dir()}")
        return flags

    def render(self, knobs: dict) -> Variant:
        lines = []
        for name, value in knobs.items():
            if isinstance(value, str):
                lines.append(f"#define {name}_{value} 1")
            else:
                lines.append(f"#define {name} {value}")
        source = "\n".join(lines) + "\n" + self.family_source
        launch = [
            _substitute_step(step, knobs)
            for step in self.family["launch"]
            if evaluate(step.get("when", "1"), knobs)
        ]
        temps = [
            {**t, "shape": [_substitute(s, knobs) for s in t["shape"]]}
            for t in self.family.get("temps", [])
            if evaluate(t.get("when", "1"), knobs)
        ]
        for t in temps:
            t.pop("when", None)
        return Variant(self.name, dict(knobs), source, launch, temps)

    def variants(self) -> list[Variant]:
        return [self.render(k) for k in self.knob_space()]


def _holds(constraint, point: dict, cases: list[dict]) -> bool:
    """A constraint naming sizes must hold in every size case."""
    return all(constraint.evaluate({**case, **point}) for case in cases)


def _substitute(expression, knobs: dict) -> str:
    """Replace knob names in an expression by their values (sizes stay symbolic)."""
    if isinstance(expression, int):
        return str(expression)
    return parse_expression(expression).substitute(knobs)


def _substitute_step(step: dict, knobs: dict) -> dict:
    if "memset" in step:
        return {"memset": step["memset"], "value": step.get("value", 0)}
    return {
        "kernel": step["kernel"],
        "grid": [_substitute(g, knobs) for g in step["grid"]],
        "block": [_substitute(b, knobs) for b in step["block"]],
        "shared": _substitute(step.get("shared", "0"), knobs),
        "args": list(step["args"]),
    }


def cutlass_include_dir() -> Path:
    """The CUTLASS/CuTe headers of the nvidia-cutlass wheel (cutlass_library/source/include)."""
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the nvidia-cutlass wheel is not installed (pip install nvidia-cutlass)")
    return Path(list(spec.submodule_search_locations)[0]) / "source" / "include"


def load(folder: Path) -> Problem:
    spec = tomllib.loads((folder / "problem.toml").read_text())
    problem = Problem(folder, spec)
    if "family" in spec:
        problem.family_source = (folder / spec["family"]["source"]).read_text()
    return problem


def bundled() -> list[Problem]:
    """The bundled CUDA families; a KernelBench-format problem (kind = "pytorch") has no family."""
    return [load(p.parent) for p in sorted(PROBLEMS_DIR.glob("*/problem.toml"))
            if tomllib.loads(p.read_text()).get("problem", {}).get("kind") != "pytorch"]


def shape_of(arg_shape: list, names: dict) -> tuple[int, ...]:
    return tuple(evaluate_int(s, names) for s in arg_shape)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
