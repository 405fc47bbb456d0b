"""KernelBench programs read without running them: a reference (`class Model`) or a solution
(`class ModelNew`), with `get_inputs()`, `get_init_inputs()` and module-level size constants.

The web tier stores and shows such a problem with this module alone (standard library only); only a
GPU worker executes the program (gpu_runner.pytorch_worker). A mistake is a `ProgramError` whose
message is one sentence naming the line.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

MAX_CONSTANT_ELEMENTS = 64
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.FunctionDef, ast.Assign, ast.AnnAssign)
_TASK_FILE = re.compile(r"^(\d+)_(.+)\.py$")


class ProgramError(ValueError):
    """A KernelBench program that cannot be used; `line` is its line when one is to blame."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass(frozen=True)
class KernelBenchProgram:
    source: str
    model_class: str                       # "Model" for a reference, "ModelNew" for a solution
    forward_params: tuple[str, ...]        # forward's parameters after self
    init_params: tuple[str, ...]           # __init__'s parameters after self
    constants: dict[str, Any] = field(default_factory=dict)   # module-level literals, in file order
    skipped_constants: tuple[str, ...] = ()                   # assignments that are not literals
    imports: tuple[str, ...] = ()
    uses_load_inline: bool = False

    @property
    def sizes(self) -> dict[str, int]:
        """The integer constants: the sizes the program runs at."""
        return {k: v for k, v in self.constants.items() if isinstance(v, int) and not isinstance(v, bool)}


def parse_program(source: str, *, model_class: str = "Model") -> KernelBenchProgram:
    """Read a program's shape; raise ProgramError with a sentence if it is not a KernelBench program."""
    try:
        return _parse_program(source, model_class=model_class)
    except RecursionError:  # Python's parser, or the walk over an expression thousands of terms deep
        raise ProgramError("The program nests too deeply to be read (an expression or a bracket thousands of levels "
                           "deep); write it with fewer levels.") from None


def _parse_program(source: str, *, model_class: str) -> KernelBenchProgram:
    if "\x00" in source:
        raise ProgramError("The program is not a text file.")
    if not source.strip():
        raise ProgramError("The program is empty.")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProgramError(f"The program is not valid Python: {exc.msg} at line {exc.lineno}.", exc.lineno) from None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    # A reference is executed by the worker only, but a statement run on import would run before any
    # check; solutions may build their extension at import (load_inline inside try), as KernelBench's do.
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue   # a docstring or a bare literal
        if not isinstance(node, _TOP_LEVEL) and model_class == "Model":
            raise ProgramError(f"Line {node.lineno} runs a statement when the program is loaded; a KernelBench "
                               f"program holds only imports, constants, classes and functions at its top level.",
                               node.lineno)
    model = classes.get(model_class)
    if model is None:
        other = "ModelNew" if model_class == "Model" else "Model"
        hint = f" (it defines {other}: upload it as a {'solution' if other == 'ModelNew' else 'reference'})" \
            if other in classes else ""
        raise ProgramError(f"The program defines no class {model_class}{hint}.")
    methods = {n.name: n for n in model.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "forward" not in methods:
        raise ProgramError(f"Class {model_class} at line {model.lineno} has no forward method.", model.lineno)
    for name in ("get_inputs", "get_init_inputs"):
        if name not in functions and model_class == "Model":
            raise ProgramError(f"The program defines no function {name}(); KernelBench calls it to make the "
                               f"{'inputs of forward' if name == 'get_inputs' else 'arguments of Model(...)'}.")
    forward_params = _params(methods["forward"])
    init_params = _params(methods["__init__"]) if "__init__" in methods else ()
    constants, skipped = _constants(tree)
    imports = tuple(sorted({alias.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                            for alias in n.names} |
                           {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}))
    uses_load_inline = any(isinstance(n, ast.Attribute) and n.attr in ("load_inline", "load") or
                           isinstance(n, ast.Name) and n.id == "load_inline" for n in ast.walk(tree))
    return KernelBenchProgram(source=source, model_class=model_class, forward_params=forward_params,
                              init_params=init_params, constants=constants, skipped_constants=tuple(skipped),
                              imports=imports, uses_load_inline=uses_load_inline)


def task_name(file_name: str, level: int | None = None) -> tuple[str, str]:
    """(slug, title) for a KernelBench file such as `19_ReLU.py` in level 1: ('kb1_19_relu', 'KernelBench L1 19: ReLU')."""
    match = _TASK_FILE.match(file_name)
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    number, words = (match.group(1), match.group(2)) if match else ("", stem)
    slug = re.sub(r"[^a-z0-9]+", "_", words.lower()).strip("_")[:60] or "task"
    prefix = f"kb{level}_" if level is not None else "kb_"
    slug = f"{prefix}{number}_{slug}" if number else f"{prefix}{slug}"
    title = f"KernelBench{f' L{level}' if level is not None else ''}{f' {number}' if number else ''}: " \
            f"{words.replace('_', ' ').strip()}"
    return slug, title


def _params(function: ast.FunctionDef) -> tuple[str, ...]:
    names = [a.arg for a in function.args.posonlyargs + function.args.args][1:]
    if function.args.vararg is not None:
        names.append("*" + function.args.vararg.arg)
    return tuple(names)


def _constants(tree: ast.Module) -> tuple[dict[str, Any], list[str]]:
    constants: dict[str, Any] = {}
    skipped: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        for target in targets:
            names = [target] if isinstance(target, ast.Name) else \
                list(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else []
            try:
                evaluated = _literal(value, constants) if value is not None else None
            except ValueError:
                skipped.extend(n.id for n in names if isinstance(n, ast.Name))
                continue
            if len(names) == 1 and isinstance(names[0], ast.Name):
                constants[names[0].id] = evaluated
            elif isinstance(evaluated, (tuple, list)) and len(evaluated) == len(names) and \
                    all(isinstance(n, ast.Name) for n in names):
                constants.update({n.id: v for n, v in zip(names, evaluated)})
            else:
                skipped.extend(n.id for n in names if isinstance(n, ast.Name))
    return constants, skipped


def _literal(node: ast.AST, known: dict[str, Any]) -> Any:
    """A number, string, bool, tuple or list made of literals, earlier constants and + - * / // % ** << >>.
    Raises ValueError for what it cannot evaluate (the caller skips that constant)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in known:
        return known[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        if len(node.elts) > MAX_CONSTANT_ELEMENTS:
            raise ValueError("too long")
        items = [_literal(e, known) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand, known)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod,
                                                            ast.Pow, ast.LShift, ast.RShift)):
        left, right = _literal(node.left, known), _literal(node.right, known)
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and 0 <= right <= 64:
            return left * right
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            if abs(left) > 2**62 or abs(right) > 2**62:
                raise ValueError("too large")
            if isinstance(node.op, (ast.Pow, ast.LShift, ast.RShift)):
                return _power_or_shift(node.op, left, right)
            try:
                return {ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
                        ast.Mult: lambda: left * right, ast.Div: lambda: left / right,
                        ast.FloorDiv: lambda: left // right, ast.Mod: lambda: left % right}[type(node.op)]()
            except ZeroDivisionError:
                raise ValueError("division by zero") from None
    raise ValueError("not a literal")


# The largest magnitude `**` and `<<` may give, and the largest exponent or shift: sizes are written as
# `10**9` or `1 << 20`; `10**10**10` in a program shown on the web tier must not hang it or fill its memory.
MAX_POWER_RESULT = 2**64
MAX_EXPONENT = 64


def _power_or_shift(op: ast.operator, left: int | float, right: int | float) -> int | float:
    """`left ** right`, `left << right` or `left >> right`, refused (ValueError) before it is computed
    when the exponent or shift is beyond MAX_EXPONENT or the result beyond MAX_POWER_RESULT."""
    if isinstance(op, (ast.LShift, ast.RShift)):
        if not (isinstance(left, int) and isinstance(right, int)) or not 0 <= right <= MAX_EXPONENT:
            raise ValueError("not a shift of integers")
        if isinstance(op, ast.RShift):
            return left >> right
        if abs(left).bit_length() + right > MAX_POWER_RESULT.bit_length():
            raise ValueError("too large")
        result = left << right
    else:
        if abs(right) > MAX_EXPONENT:
            raise ValueError("exponent too large")
        if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                (abs(left).bit_length() - 1) * right > MAX_POWER_RESULT.bit_length():
            raise ValueError("too large")
        try:
            result = left ** right
        except (OverflowError, ZeroDivisionError):
            raise ValueError("not a finite number") from None
        if isinstance(result, complex):
            raise ValueError("not a real number")
    if abs(result) > MAX_POWER_RESULT:
        raise ValueError("too large")
    return result
