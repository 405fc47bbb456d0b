import pytest

from gpu_runner.expressions import ExpressionError, parse_expression


def test_it_evaluates_arithmetic_and_the_three_functions():
    expr = parse_expression("ceil_div(N, 256) + min(N, 7) * max(2, 3) - N // 10 % 4", {"N"})
    assert expr.evaluate({"N": 1000}) == 4 + 7 * 3 - (100 % 4)
    assert expr.names == {"N"}


def test_integer_results_are_required_where_asked():
    assert parse_expression("N / 4", {"N"}).evaluate_int({"N": 1024}) == 256
    with pytest.raises(ExpressionError, match="not an integer"):
        parse_expression("N / 3", {"N"}).evaluate_int({"N": 1024})


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os')", "calling anything"),
    ("N.real", "Attribute"),
    ("N[0]", "Subscript"),
    ("2 ** 1000", "Pow"),
    ("lambda: 1", "Lambda"),
    ("M + 1", "unknown name 'M'"),
    ("N < 3", "comparison"),
    ("'abc'", "string"),
    ("ceil_div(N)", "takes 2 arguments"),
    ("min(N, key=1)", "keyword"),
    ("N +", "not a valid expression"),
    ("", "empty"),
])
def test_it_refuses_what_is_not_on_the_whitelist(text, fragment):
    with pytest.raises(ExpressionError, match=fragment):
        parse_expression(text, {"N"})


def test_constraints_allow_comparisons_strings_and_boolean_logic():
    expr = parse_expression("ALGO != 'shared' or BLOCK >= 256", {"ALGO", "BLOCK"}, boolean=True)
    assert expr.evaluate({"ALGO": "shared", "BLOCK": 512}) is True
    assert expr.evaluate({"ALGO": "shared", "BLOCK": 128}) is False
    assert expr.evaluate({"ALGO": "naive", "BLOCK": 128}) is True
    assert parse_expression("not (1 < N <= 4)", {"N"}, boolean=True).evaluate({"N": 3}) is False


def test_division_by_zero_is_an_expression_error():
    with pytest.raises(ExpressionError, match="division by zero"):
        parse_expression("N // (N - N)", {"N"}).evaluate({"N": 3})


def test_substitute_binds_knob_values_into_the_text():
    expr = parse_expression("ceil_div(N, BLOCK * VEC)", {"N", "BLOCK", "VEC"})
    assert expr.substitute({"BLOCK": 256, "VEC": 4}) == "ceil_div(N, 256 * 4)"
