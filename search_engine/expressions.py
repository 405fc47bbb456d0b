"""Safe evaluation of the launch-plan and constraint expressions of docs/contracts.md.

Integers, + - * / // %, parentheses, names (sizes, knobs), ceil_div(a, b), min, max, comparisons and
and/or/not. Anything else is refused with a sentence that says what was wrong.
"""

from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache
from collections.abc import Mapping

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class ExpressionError(ValueError):
    pass


def _ceil_div(a, b):
    return -(-a // b)


_FUNCTIONS = {"ceil_div": _ceil_div, "min": min, "max": max}


def evaluate(expression: str | int | float, names: Mapping[str, object]):
    """Value of an expression given the names it may use."""
    if isinstance(expression, (int, float)) and not isinstance(expression, bool):
        return expression
    text = str(expression).strip()
    return _eval(_parse(text), names, text)


@lru_cache(maxsize=4096)
def _parse(text: str) -> ast.AST:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"Expression {text!r} is not valid: {exc.msg}.") from None


def _eval(node, names, text):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("True", "False"):
            return node.id == "True"
        if node.id not in names:
            raise ExpressionError(f"Expression {text!r} uses the unknown name {node.id!r}.")
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, names, text), _eval(node.right, names, text)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ExpressionError(f"Expression {text!r} divides by zero.")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, names, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
        return _eval(node.operand, names, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, names, text)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, names, text) for v in node.values)
        return any(_eval(v, names, text) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, text)
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise ExpressionError(f"Expression {text!r} uses an unsupported comparison.")
            right = _eval(comparator, names, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS and not node.keywords:
        args = [_eval(a, names, text) for a in node.args]
        if node.func.id == "ceil_div" and len(args) != 2:
            raise ExpressionError(f"Expression {text!r}: ceil_div takes two arguments.")
        if node.func.id == "ceil_div" and args[1] == 0:
            raise ExpressionError(f"Expression {text!r} divides by zero.")
        return _FUNCTIONS[node.func.id](*args)
    raise ExpressionError(f"Expression {text!r} uses something other than arithmetic, names, ceil_div, min or max.")


def names_in(expression: str | int | float) -> set[str]:
    """The names an expression refers to (functions excluded)."""
    if not isinstance(expression, str):
        return set()
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS and node.id not in ("True", "False"):
            found.add(node.id)
    return found


def evaluate_int(expression, names: Mapping[str, object]) -> int:
    value = evaluate(expression, names)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError(f"Expression {expression!r} is not finite.")
        value = int(value)
    return int(value)
