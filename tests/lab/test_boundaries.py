"""search_engine.lab is a library: importing all of it pulls in neither Django nor gpu_runner."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_lab_imports_neither_django_nor_gpu_runner():
    code = ("import sys, search_engine.lab.datasets, search_engine.lab.evaluation, search_engine.lab.experiment, "
            "search_engine.lab.recalibration, search_engine.lab.rl, search_engine.lab.discovery, "
            "search_engine.lab.reports; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'gpu_runner', 'kernellab')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"


def test_the_expression_language_imports_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import klexpr; "
            "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
            "- set(sys.stdlib_module_names) - {'klexpr'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]"
