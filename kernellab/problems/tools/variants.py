"""Read a bundled problem's family, enumerate its variants and render their sources.

A small stand-in for `gpu_runner.spec` used by the bundled-problem checks. It runs with the
standard library alone (tomllib + ast) so that it also runs on the device machine, where
Django and the rest of the project are absent. It follows docs/contracts.md, including the
section "Bundled problems: extensions to the spec".
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PROBLEMS_DIR = Path(__file__).resolve().parent.parent

_FUNCTIONS = {
    "ceil_div": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}


class ExpressionError(ValueError):
    pass


def evaluate(expression: str | int, names: dict[str, int | str]) -> int | bool | str:
    """Evaluate a spec expression (integers, sizes, knobs, + - * / // %, ceil_div, min, max,
    comparisons, and/or/not). `/` must divide exactly: launch plans are integers."""
    if isinstance(expression, bool):
        return expression
    if isinstance(expression, int):
        return expression
    tree = ast.parse(str(expression), mode="eval")
    return _eval(tree.body, names, str(expression))


def _eval(node: ast.AST, names: dict, text: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExpressionError(f"unknown name {node.id!r} in {text!r}")
        return names[node.id]
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, names, text), _eval(node.right, names, text)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.FloorDiv):
            return a // b
        if isinstance(node.op, ast.Mod):
            return a % b
        if isinstance(node.op, ast.Div):
            if a % b:
                raise ExpressionError(f"{a}/{b} is not exact in {text!r}")
            return a // b
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, names, text)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.Not):
            return not v
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names, text) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, text)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, names, text)
            ok = {
                ast.Eq: lambda: left == right,
                ast.NotEq: lambda: left != right,
                ast.Lt: lambda: left < right,
                ast.LtE: lambda: left <= right,
                ast.Gt: lambda: left > right,
                ast.GtE: lambda: left >= right,
            }[type(op)]()
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        return _FUNCTIONS[node.func.id](*(_eval(a, names, text) for a in node.args))
    raise ExpressionError(f"unsupported expression {ast.dump(node)} in {text!r}")


def _exact_div(a: int, b: int) -> int:
    if a % b:
        raise ExpressionError(f"{a}/{b} is not exact")
    return a // b


_EVAL_GLOBALS = {"__builtins__": {}, "_exact_div": _exact_div, **_FUNCTIONS}
_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Name,
            ast.Constant, ast.Load, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod,
            ast.USub, ast.Not, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def compile_expression(text: str):
    """Check an expression against the spec grammar and compile it; returns (code, names used)."""
    tree = ast.parse(text, mode="eval")
    used = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ExpressionError(f"unsupported syntax {type(node).__name__} in {text!r}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
            raise ExpressionError(f"unknown function in {text!r}")
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            used.add(node.id)

    class ExactDiv(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp):
            self.generic_visit(node)
            if isinstance(node.op, ast.Div):
                return ast.copy_location(
                    ast.Call(ast.Name("_exact_div", ast.Load()), [node.left, node.right], []), node)
            return node

    tree = ast.fix_missing_locations(ExactDiv().visit(tree))
    return compile(tree, f"<{text}>", "eval"), used


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
            code, used = compile_expression(text)
            unknown = used - set(names) - set(cases[0])
            if unknown:
                raise ExpressionError(f"constraint {text!r} names {sorted(unknown)}: not knobs or sizes")
            knob_names = used & set(names)
            last = max(names.index(n) for n in knob_names) if knob_names else 0
            checks[last].append((code, bool(used - knob_names)))
        valid: list[dict] = []
        point: dict = {}

        def bind(i: int) -> None:
            if i == len(names):
                valid.append(dict(point))
                return
            for value in knobs[names[i]]:
                point[names[i]] = value
                if all(_holds(code, point, cases if sized else [{}]) for code, sized in checks[i]):
                    bind(i + 1)
            del point[names[i]]

        bind(0)
        return valid

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


def _holds(code, point: dict, cases: list[dict]) -> bool:
    """A constraint naming sizes must hold in every size case."""
    return all(eval(code, _EVAL_GLOBALS, {**case, **point}) for case in cases)


def _substitute(expression, knobs: dict) -> str:
    """Replace knob names in an expression by their values (sizes stay symbolic)."""
    if isinstance(expression, int):
        return str(expression)
    tree = ast.parse(str(expression), mode="eval")

    class Knobs(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name):
            if node.id in knobs:
                return ast.copy_location(ast.Constant(knobs[node.id]), node)
            return node

    return ast.unparse(Knobs().visit(tree))


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


def load(folder: Path) -> Problem:
    spec = tomllib.loads((folder / "problem.toml").read_text())
    problem = Problem(folder, spec)
    if "family" in spec:
        problem.family_source = (folder / spec["family"]["source"]).read_text()
    return problem


def bundled() -> list[Problem]:
    return [load(p.parent) for p in sorted(PROBLEMS_DIR.glob("*/problem.toml"))]


def shape_of(arg_shape: list, names: dict) -> tuple[int, ...]:
    return tuple(int(evaluate(s, names)) for s in arg_shape)


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
