"""Sizes a KernelBench program writes as `10**9` or `1 << 20` are read on the web tier (gpu_runner.kernelbench
`_literal`, standard library only); a power or shift too large to be a size is skipped, never computed."""
import ast
import time

import pytest

from gpu_runner.kernelbench import MAX_POWER_RESULT, _literal, parse_program

PROGRAM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

{constants}

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''


def evaluate(text: str, known: dict | None = None):
    return _literal(ast.parse(text, mode="eval").body, known or {})


@pytest.mark.parametrize("text, value", [
    ("10**12", 10**12), ("2 ** 64", 2**64), ("1 << 20", 1 << 20), ("3 << 4", 48), ("1024 >> 3", 128),
    ("-1 >> 1", -1), ("2 ** 0", 1), ("(-2) ** 3", -8), ("2 ** -2", 0.25), ("1.5 ** 2", 2.25),
    ("4 * 2**10", 4096), ("(1 << 10) * 2", 2048), ("10**3 // 7", 142),
])
def test_powers_and_shifts_of_numbers_are_evaluated(text, value):
    assert evaluate(text) == value


def test_powers_and_shifts_use_earlier_constants():
    assert evaluate("N ** 2", {"N": 1 << 10}) == 1 << 20
    assert evaluate("1 << bits", {"bits": 12}) == 4096


@pytest.mark.parametrize("text", [
    "10 ** 10 ** 10", "2 ** 65", "3 ** 64", "2 ** 1000", "10 ** 100", "9 ** 9 ** 9", "1 << 65", "1 << 10000",
    "(1 << 62) << 3", "1 >> 65", "1 >> -1", "1 << -1", "2 ** -65", "1.5 << 2", "1 << 2.0", "0 ** -1",
    "(-8) ** 0.5", "1e300 ** 2", "True << 3", "2 ** True",
])
def test_a_power_or_shift_beyond_its_limits_is_not_a_literal(text):
    with pytest.raises(ValueError):
        evaluate(text)


def test_a_huge_exponent_is_refused_at_once_rather_than_computed():
    started = time.perf_counter()
    for text in ("9 ** 9 ** 9", "(2**62) ** 64", "10 ** (2**62)"):
        with pytest.raises(ValueError):
            evaluate(text)
    assert time.perf_counter() - started < 0.5


def test_the_result_limit_is_two_to_the_64():
    assert evaluate("1 << 64") == MAX_POWER_RESULT == 2**64
    assert evaluate("-(2 ** 64)") == -MAX_POWER_RESULT


def test_sizes_written_as_powers_and_shifts_reach_the_sizes_summary():
    program = parse_program(PROGRAM.format(constants="batch_size = 2**4\ndim = 1 << 20\nbig = 10**12\n"
                                                     "half = dim >> 1\nhuge = 10**100\nshape = (batch_size, dim)"))
    assert program.sizes == {"batch_size": 16, "dim": 1 << 20, "big": 10**12, "half": 1 << 19}
    assert program.constants["shape"] == (16, 1 << 20)
    assert program.skipped_constants == ("huge",)
