"""Loading a script of benchmarks/ (not a package module) in a test."""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def loaded_script(path: Path, name: str):
    """The script at path as a module named name, registered in sys.modules while the block runs (its
    dataclasses look their module up there) and removed after."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
