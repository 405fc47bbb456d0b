"""pyproject.toml says the truth: every package the code imports is declared, and nothing declared for the
pages goes unused."""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernellab", "search_engine", "gpu_runner", "klexpr")
# Scripts run from their own folder with their own sys.path (see kernellab/problems/README.md).
SCRIPT_FOLDERS = (ROOT / "kernellab" / "problems" / "tools",)
# Import names of the optional extras that are not installed on this machine, by distribution.
NOT_INSTALLED_HERE = {"cupy": "cupy-cuda13x", "pycuda": "pycuda", "pynvml": "nvidia-ml-py", "torch": "torch",
                      "trl": "trl", "transformers": "transformers", "tokenizers": "tokenizers", "datasets": "datasets"}


def _distribution_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {_distribution_name(requirement) for requirement in requirements}


def _fallbacks(tree: ast.AST) -> set[int]:
    """Line numbers of imports tried inside `try: … except ImportError:` (or `except Exception:`) and of
    their alternatives: the code works without them."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError", "Exception")
                for handler in node.handlers):
            lines.update(child.lineno for statement in node.body + node.handlers for child in ast.walk(statement)
                         if isinstance(child, (ast.Import, ast.ImportFrom)))
    return lines


def _third_party_imports() -> dict[str, str]:
    """Top-level import name -> one file that imports it."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if any(folder in path.parents for folder in SCRIPT_FOLDERS):
                continue
            tree = ast.parse(path.read_text())
            optional = _fallbacks(tree)
            for node in ast.walk(tree):
                if getattr(node, "lineno", None) in optional:
                    continue
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES:
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_package_the_code_imports_is_declared_in_pyproject():
    installed = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared = {}
    for name, where in _third_party_imports().items():
        distributions = installed.get(name) or [NOT_INSTALLED_HERE.get(name, name)]
        if not any(_distribution_name(distribution) in declared for distribution in distributions):
            undeclared[name] = where
    assert undeclared == {}


def test_plotly_is_declared_because_the_server_builds_the_charts_with_it():
    assert "plotly" in _declared()
    assert "plotly" in _third_party_imports()
