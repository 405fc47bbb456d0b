"""Shared fixtures for the gpu_runner tests: small problems and candidates."""
from __future__ import annotations

from pathlib import Path

from gpu_runner import Candidate, load_problem, parse_problem
from gpu_runner.spec import KernelLaunch
from klexpr import parse_expression

PROBLEMS = Path(__file__).parent / "problems"


def saxpy_problem(n: int | None = None, odd: int | None = None):
    folder = PROBLEMS / "saxpy"
    text = (folder / "problem.toml").read_text()
    if n is not None:
        text = text.replace("default = { N = 16777216 }", f"default = {{ N = {n} }}")
    if odd is not None:
        text = text.replace("odd = { N = 1000003 }", f"odd = {{ N = {odd} }}")
    problem = parse_problem(text, (folder / "reference.cu").read_text(), (folder / "family.cu").read_text())
    object.__setattr__(problem, "folder", folder)
    return problem


def reduce_problem():
    return load_problem(PROBLEMS / "reduce_sum")


def launch(kernel: str, args=("x", "y", "out", "a", "n"), grid="ceil_div(N, 256)", block=256, shared="0"):
    names = frozenset({"N"})
    return KernelLaunch(kernel, (parse_expression(grid, names),), (parse_expression(block, names),),
                        parse_expression(shared, names), tuple(args))


def candidate(source: str, kernel: str, name: str | None = None, **kwargs) -> Candidate:
    return Candidate(source=source, launch=(launch(kernel, **kwargs),), name=name or kernel)
