"""The one expression language of KernelLab (docs/contracts.md, "Expressions").

Problem specs, family constraints, search generators, surrogate features and the bundled-problem
tools all evaluate their size, launch and constraint expressions here. Text is parsed once with
`ast`, checked against a whitelist of node types and names, and evaluation walks the checked tree:
no attribute access, subscripts, lambdas, powers or calls other than `ceil_div`, `min` and `max`
ever reach Python. Source length, tree size and depth, and the magnitude of every number are
bounded, so no expression can take the process's memory or stack. Every refusal is an
`ExpressionError` with a sentence that says what was wrong.

This package imports nothing of the project, so `gpu_runner`, `search_engine`, `kernellab` and the
standard-library-only tools that run on the device machine can all use it.
"""
from __future__ import annotations

import ast
import math
import numbers
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

Number = int | float
Value = int | float | str | bool

MAX_LENGTH = 1000          # characters of source
MAX_NODES = 500            # syntax nodes after parsing (operators and contexts included)
MAX_DEPTH = 50             # nesting of the syntax tree
MAX_MAGNITUDE = 2 ** 64    # no number, given or computed, may be larger in absolute value

_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_FUNCTIONS = {"ceil_div": 2, "min": None, "max": None}
_ORDERINGS = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}


class ExpressionError(ValueError):
    """An expression is malformed, names something it may not, or cannot be evaluated."""


@dataclass(frozen=True)
class Expression:
    """A parsed, checked expression; `names` are the sizes/knobs it reads."""

    text: str
    tree: ast.Expression = field(compare=False, repr=False)
    names: frozenset[str] = field(compare=False)
    boolean: bool = False

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        return _Evaluation(env, self.text).value(self.tree.body)

    def evaluate_int(self, env: Mapping[str, Value]) -> int:
        """The value as an integer: grid, block, shared and shape expressions must come out integral."""
        value = self.evaluate(env)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExpressionError(f"'{self.text}' gives {value!r}, not a number")
        if isinstance(value, float):
            if not value.is_integer():
                raise ExpressionError(f"'{self.text}' gives {value:g}, not an integer")
            value = int(value)
        return value

    def substitute(self, values: Mapping[str, Value]) -> str:
        """The expression's text with some names replaced by constants (knobs of a variant)."""
        tree = _Substitute(values).visit(ast.parse(self.text, mode="eval"))
        return ast.unparse(ast.fix_missing_locations(tree))

    def __str__(self) -> str:
        return self.text


def parse_expression(text: str | int | float, allowed_names: set[str] | frozenset[str] | None = None,
                     *, boolean: bool = False) -> Expression:
    """Parse and check `text`.

    `allowed_names` is the set of names the expression may read; None accepts any name and leaves
    the check to evaluation. `boolean` allows comparisons, and/or/not, True/False and string
    constants (constraints and `when` conditions)."""
    if isinstance(text, bool):
        raise ExpressionError(f"{text!r} is a boolean, not an expression")
    if isinstance(text, (int, float)):
        text = repr(_bounded(text, repr(text)))
    if not isinstance(text, str):
        raise ExpressionError(f"{text!r} is not an expression (use a string or a number)")
    text = text.strip()
    if not text:
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"'{text}' is not a valid expression ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError):
        raise ExpressionError(f"'{_short(text)}' is not a valid expression (it cannot be read)") from None
    _check_size(tree.body, text)
    names: set[str] = set()
    allowed = None if allowed_names is None else frozenset(allowed_names)
    _check(tree.body, text, allowed, boolean, names)
    return Expression(text=text, tree=tree, names=frozenset(names), boolean=boolean)


def evaluate(expression: str | int | float, env: Mapping[str, Value], *, boolean: bool = True) -> Value:
    """Value of an expression whose names are the keys of `env` (parsed once per text)."""
    if isinstance(expression, (int, float)) and not isinstance(expression, bool):
        return _bounded(expression, repr(expression))
    if not isinstance(expression, str):
        raise ExpressionError(f"{expression!r} is not an expression (use a string or a number)")
    return _parse_any_names(expression, boolean).evaluate(env)


def evaluate_int(expression: str | int | float, env: Mapping[str, Value]) -> int:
    """`evaluate` for grid, block, shared and shape expressions: the value must be an integer."""
    if isinstance(expression, bool) or not isinstance(expression, (str, int, float)):
        raise ExpressionError(f"{expression!r} is not an expression (use a string or a number)")
    return _parse_any_names(str(expression), False).evaluate_int(env)


@lru_cache(maxsize=4096)
def _parse_any_names(text: str, boolean: bool) -> Expression:
    return parse_expression(text, None, boolean=boolean)


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _check_size(root: ast.AST, text: str) -> None:
    count = 0
    pending = [(root, 1)]
    while pending:
        node, depth = pending.pop()
        count += 1
        if count > MAX_NODES:
            raise ExpressionError(f"'{_short(text)}' has more than {MAX_NODES} parts")
        if depth > MAX_DEPTH:
            raise ExpressionError(f"'{_short(text)}' is nested more than {MAX_DEPTH} levels deep")
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _check(node: ast.AST, text: str, allowed: frozenset[str] | None, boolean: bool, names: set[str]) -> None:
    def bad(what: str) -> ExpressionError:
        return ExpressionError(f"'{text}': {what} is not allowed")

    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            if not boolean:
                raise bad(f"the constant {value!r}")
        elif isinstance(value, str):
            if not boolean:
                raise bad(f"the string {value!r}")
        elif isinstance(value, (int, float)):
            _bounded(value, text)
        else:
            raise bad(f"the constant {value!r}")
    elif isinstance(node, ast.Name):
        if allowed is not None and node.id not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ExpressionError(f"'{text}': unknown name '{node.id}' (known: {known})")
        names.add(node.id)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _ARITHMETIC):
            raise bad(f"the operator {type(node.op).__name__}")
        _check(node.left, text, allowed, boolean, names)
        _check(node.right, text, allowed, boolean, names)
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not) and not boolean:
            raise bad("'not'")
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise bad(f"the operator {type(node.op).__name__}")
        _check(node.operand, text, allowed, boolean, names)
    elif isinstance(node, ast.BoolOp):
        if not boolean:
            raise bad("'and'/'or'")
        for value in node.values:
            _check(value, text, allowed, boolean, names)
    elif isinstance(node, ast.Compare):
        if not boolean:
            raise bad("a comparison")
        for op in node.ops:
            if not isinstance(op, _COMPARISONS):
                raise bad(f"the comparison {type(op).__name__}")
        _check(node.left, text, allowed, boolean, names)
        for comparator in node.comparators:
            _check(comparator, text, allowed, boolean, names)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise bad("calling anything but ceil_div, min or max")
        if node.keywords:
            raise bad("keyword arguments")
        arity = _FUNCTIONS[node.func.id]
        if arity is not None and len(node.args) != arity:
            raise ExpressionError(f"'{text}': {node.func.id} takes {arity} arguments")
        if arity is None and len(node.args) < 2:
            raise ExpressionError(f"'{text}': {node.func.id} takes at least 2 arguments")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise bad("*arguments")
            _check(arg, text, allowed, boolean, names)
    else:
        raise bad(type(node).__name__)


def _bounded(value: Value, text: str) -> Value:
    """`value` itself when it is a string, a boolean or a number within MAX_MAGNITUDE."""
    if isinstance(value, (str, bool)):
        return value
    if not isinstance(value, (int, float)) and isinstance(value, numbers.Real):  # numpy scalars
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(value, int):
        if -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
            return value
        raise ExpressionError(f"'{_short(text)}' reaches a number beyond 2**64")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError(f"'{_short(text)}' reaches {value}, not a finite number")
        if abs(value) <= MAX_MAGNITUDE:
            return value
        raise ExpressionError(f"'{_short(text)}' reaches a number beyond 2**64")
    raise ExpressionError(f"'{_short(text)}' reads {type(value).__name__} {value!r}, not a number or a string")


class _Evaluation:
    """One evaluation of a checked tree against the values of its names."""

    def __init__(self, env: Mapping[str, Value], text: str):
        self.env = env
        self.text = text

    def value(self, node: ast.AST) -> Value:
        return _VISIT[type(node)](self, node)

    def _constant(self, node: ast.Constant) -> Value:
        return node.value

    def _name(self, node: ast.Name) -> Value:
        try:
            found = self.env[node.id]
        except KeyError:
            raise ExpressionError(f"'{self.text}': no value for the name '{node.id}'") from None
        if type(found) is int and -MAX_MAGNITUDE <= found <= MAX_MAGNITUDE:
            return found
        return _bounded(found, self.text)

    def _binary(self, node: ast.BinOp) -> Value:
        left, right = self.number(node.left), self.number(node.right)
        try:
            result = self._arithmetic(node.op, left, right)
        except ArithmeticError:
            raise ExpressionError(f"'{_short(self.text)}' reaches a number it cannot compute") from None
        if type(result) is int and -MAX_MAGNITUDE <= result <= MAX_MAGNITUDE:
            return result
        return _bounded(result, self.text)

    def _unary(self, node: ast.UnaryOp) -> Value:
        if isinstance(node.op, ast.Not):
            return not self.value(node.operand)
        operand = self.number(node.operand)
        return -operand if isinstance(node.op, ast.USub) else +operand

    def _boolean(self, node: ast.BoolOp) -> bool:
        if isinstance(node.op, ast.And):
            return all(bool(self.value(v)) for v in node.values)
        return any(bool(self.value(v)) for v in node.values)

    def _call(self, node: ast.Call) -> Value:
        args = [self.number(a, f"{node.func.id} of") for a in node.args]   # type: ignore[attr-defined]
        if node.func.id == "ceil_div":   # type: ignore[attr-defined]
            try:
                return _bounded(self._ceil_div(args[0], args[1]), self.text)
            except ArithmeticError:
                raise ExpressionError(f"'{_short(self.text)}' reaches a number it cannot compute") from None
        return min(args) if node.func.id == "min" else max(args)   # type: ignore[attr-defined]

    def number(self, node: ast.AST, what: str = "arithmetic on") -> Number:
        value = self.value(node)
        if isinstance(value, str):
            raise ExpressionError(f"'{self.text}': {what} a string is not allowed")
        return value

    def _arithmetic(self, op: ast.operator, left: Number, right: Number) -> Number:
        kind = type(op)
        if kind is ast.Add:
            return left + right
        if kind is ast.Sub:
            return left - right
        if kind is ast.Mult:
            return left * right
        if right == 0:
            raise ExpressionError(f"'{self.text}': division by zero")
        if kind is ast.Div:
            # Exact when it divides (an integer, free of float rounding), true division otherwise.
            if isinstance(left, int) and isinstance(right, int) and left % right == 0:
                return left // right
            return left / right
        if kind is ast.FloorDiv:
            return left // right
        return left % right

    def _ceil_div(self, a: Number, b: Number) -> Number:
        if b == 0:
            raise ExpressionError(f"'{self.text}': ceil_div by zero")
        if isinstance(a, int) and isinstance(b, int):
            return -(-a // b)
        return math.ceil(_bounded(a / b, self.text))

    def _compare(self, node: ast.Compare) -> bool:
        left = self.value(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.value(comparator)
            kind = type(op)
            if kind is ast.Eq:
                holds = left == right
            elif kind is ast.NotEq:
                holds = left != right
            else:
                if isinstance(left, str) != isinstance(right, str):
                    raise ExpressionError(f"'{self.text}': ordering a string against a number is not allowed")
                holds = _ORDERINGS[kind](left, right)
            if not holds:
                return False
            left = right
        return True


_VISIT = {ast.Constant: _Evaluation._constant, ast.Name: _Evaluation._name, ast.BinOp: _Evaluation._binary,
          ast.UnaryOp: _Evaluation._unary, ast.BoolOp: _Evaluation._boolean, ast.Compare: _Evaluation._compare,
          ast.Call: _Evaluation._call}


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: Mapping[str, Value]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.values:
            return ast.copy_location(ast.Constant(self.values[node.id]), node)
        return node


__all__ = ["Expression", "ExpressionError", "MAX_DEPTH", "MAX_LENGTH", "MAX_MAGNITUDE", "MAX_NODES",
           "evaluate", "evaluate_int", "parse_expression"]
