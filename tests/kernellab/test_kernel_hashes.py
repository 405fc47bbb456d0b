"""Two hashes, each named for what it hashes: a Kernel row's content, and a source text (the key of
recorded measurements)."""
from __future__ import annotations

import ast
from pathlib import Path

from gpu_runner import source_hash
from kernellab.models import kernel_content_hash
from kernellab.services.kernels import kernel_get_or_create

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "__global__ void k(float* x) { x[0] = 1.0f; }"
LAUNCH = [{"kernel": "k", "grid": [1], "block": [32], "args": ["x"]}]


def test_a_kernel_is_stored_once_per_source_launch_and_options_but_a_recording_is_found_by_source_alone(db):
    one = kernel_get_or_create(candidate={"source": SOURCE, "launch": LAUNCH})
    again = kernel_get_or_create(candidate={"source": SOURCE, "launch": LAUNCH})
    other_launch = kernel_get_or_create(candidate={"source": SOURCE, "launch": [{**LAUNCH[0], "block": [64]}]})
    assert one.pk == again.pk and other_launch.pk != one.pk
    assert one.content_hash == kernel_content_hash(SOURCE, LAUNCH)
    assert kernel_content_hash(SOURCE, LAUNCH, ["-O3"]) != one.content_hash
    assert source_hash(SOURCE) == source_hash(SOURCE) != source_hash(SOURCE + " ")


def test_no_two_modules_define_a_function_named_source_hash():
    defining = []
    for package in ("kernellab", "search_engine", "gpu_runner", "klexpr"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            if any(isinstance(node, ast.FunctionDef) and node.name == "source_hash" for node in tree.body):
                defining.append(str(path.relative_to(ROOT)))
    assert defining == ["gpu_runner/candidate.py"]
