"""A safe evaluator for the small expression language of problem specs.

Expressions are parsed once with `ast` and checked against a whitelist of node types and names;
evaluation walks the checked tree. No attribute access, subscripts, lambdas or other calls than
`ceil_div`, `min` and `max` ever reach Python.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Mapping

Number = int | float
Value = int | float | str | bool


class ExpressionError(ValueError):
    """An expression is malformed or names something it may not."""


_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
_COMPARISONS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_FUNCTIONS = {"ceil_div": 2, "min": None, "max": None}
_MAX_LENGTH = 500


def _ceil_div(a: Number, b: Number) -> Number:
    if b == 0:
        raise ExpressionError("ceil_div by zero")
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return math.ceil(a / b)


@dataclass(frozen=True)
class Expression:
    """A parsed, checked expression; `names` are the sizes/knobs it reads."""

    text: str
    tree: ast.Expression = field(compare=False, repr=False)
    names: frozenset[str] = field(compare=False)
    boolean: bool = False

    def evaluate(self, env: Mapping[str, Value]) -> Value:
        return _eval(self.tree.body, env, self.text)

    def evaluate_int(self, env: Mapping[str, Value]) -> int:
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


class _Substitute(ast.NodeTransformer):
    def __init__(self, values: Mapping[str, Value]):
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.values:
            return ast.copy_location(ast.Constant(self.values[node.id]), node)
        return node


def parse_expression(text: str | int | float, allowed_names: set[str] | frozenset[str],
                     *, boolean: bool = False) -> Expression:
    """Parse `text`; `boolean` allows comparisons, and/or/not and string constants (constraints)."""
    if isinstance(text, bool):
        raise ExpressionError(f"{text!r} is a boolean, not an expression")
    if isinstance(text, (int, float)):
        text = repr(text)
    if not isinstance(text, str):
        raise ExpressionError(f"{text!r} is not an expression (use a string or a number)")
    if not text.strip():
        raise ExpressionError("the expression is empty")
    if len(text) > _MAX_LENGTH:
        raise ExpressionError(f"the expression is longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"'{text}' is not a valid expression ({exc.msg})") from None
    names: set[str] = set()
    _check(tree.body, text, set(allowed_names), boolean, names)
    return Expression(text=text.strip(), tree=tree, names=frozenset(names), boolean=boolean)


def _check(node: ast.AST, text: str, allowed: set[str], boolean: bool, names: set[str]) -> None:
    def bad(what: str) -> ExpressionError:
        return ExpressionError(f"'{text}': {what} is not allowed")

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or node.value is None:
            raise bad(f"the constant {node.value!r}")
        if isinstance(node.value, str) and not boolean:
            raise bad(f"the string {node.value!r}")
        if not isinstance(node.value, (int, float, str)):
            raise bad(f"the constant {node.value!r}")
    elif isinstance(node, ast.Name):
        if node.id not in allowed:
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
        raise bad(f"{type(node).__name__}")


def _eval(node: ast.AST, env: Mapping[str, Value], text: str) -> Value:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        try:
            return env[node.id]
        except KeyError:
            raise ExpressionError(f"'{text}': no value for '{node.id}'") from None
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, env, text)
        right = _eval(node.right, env, text)
        if isinstance(left, str) or isinstance(right, str):
            raise ExpressionError(f"'{text}': arithmetic on a string")
        op = node.op
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if right == 0:
            raise ExpressionError(f"'{text}': division by zero")
        if isinstance(op, ast.Div):
            return left / right
        if isinstance(op, ast.FloorDiv):
            return left // right
        return left % right
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, env, text)
        if isinstance(node.op, ast.Not):
            return not operand
        if isinstance(operand, str):
            raise ExpressionError(f"'{text}': arithmetic on a string")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(bool(_eval(v, env, text)) for v in node.values)
        return any(bool(_eval(v, env, text)) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, env, text)
            if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and (
                    isinstance(left, str) != isinstance(right, str)):
                raise ExpressionError(f"'{text}': ordering a string against a number")
            ok = {ast.Eq: left == right, ast.NotEq: left != right}.get(type(op))
            if ok is None:
                ok = {ast.Lt: lambda: left < right, ast.LtE: lambda: left <= right,
                      ast.Gt: lambda: left > right, ast.GtE: lambda: left >= right}[type(op)]()
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text) for a in node.args]
        if any(isinstance(a, str) for a in args):
            raise ExpressionError(f"'{text}': {node.func.id} of a string")
        if node.func.id == "ceil_div":
            return _ceil_div(args[0], args[1])
        return min(args) if node.func.id == "min" else max(args)
    raise ExpressionError(f"'{text}': cannot evaluate {type(node).__name__}")
