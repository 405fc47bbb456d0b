"""The dependency rules of docs/architecture.md, checked on every module so a new one is covered as it lands.

search_engine and gpu_runner are libraries: importing any of their modules pulls in neither Django, nor
kernellab, nor the other library; klexpr pulls in nothing of the project. Inside the web app, selectors
only read, so none of them imports a service (services may read through selectors, never the other way).
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT_PACKAGES = ("django", "kernellab", "search_engine", "gpu_runner", "klexpr")

# Every module of a package imported in a fresh interpreter, one at a time (so one module's imports
# cannot hide another's); a module that needs an optional dependency missing here is reported, not failed.
_WALK = """
import importlib, json, pkgutil, sys
package_name, optional = sys.argv[1], set(sys.argv[2].split(','))
package = importlib.import_module(package_name)
names = [package_name] + [m.name for m in pkgutil.walk_packages(package.__path__, package_name + '.')]
report = {"pulled_in": {}, "skipped": {}}
for name in names:
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split('.')[0] in optional:
            report["skipped"][name] = exc.name
            continue
        raise
    for module in set(sys.modules) - before:
        top = module.split('.')[0]
        report["pulled_in"].setdefault(top, []).append(name)
print(json.dumps({**report, "walked": names}))
"""

# Optional accelerator and model packages: the libraries import them only where they are needed.
OPTIONAL = ("torch", "cupy", "pycuda", "pynvml", "llama_cpp", "cuda", "nvidia")


def _walk(package: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _WALK, package, ",".join(OPTIONAL)], cwd=ROOT, capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for module, missing in report["skipped"].items():
        warnings.warn(f"{module} was not imported: it needs {missing}, which is not installed here", stacklevel=2)
    return report


def _project_modules_pulled_in(report: dict, forbidden: set[str]) -> dict[str, list[str]]:
    return {top: sorted(set(importers)) for top, importers in report["pulled_in"].items() if top in forbidden}


@pytest.mark.parametrize("library, other", [("search_engine", "gpu_runner"), ("gpu_runner", "search_engine")])
def test_no_module_of_a_library_imports_django_kernellab_or_the_other_library(library, other):
    report = _walk(library)
    assert len(report["walked"]) > 10, report["walked"]
    assert _project_modules_pulled_in(report, {"django", "kernellab", other}) == {}


def test_the_walk_covers_the_lab_and_every_subpackage_of_the_search_engine():
    walked = set(_walk("search_engine")["walked"])
    for package in ("search_engine.lab", "search_engine.surrogates", "search_engine.generators", "search_engine.experts"):
        assert package in walked
    assert "search_engine.lab.reports" in walked


def test_the_expression_language_imports_nothing_of_the_project_and_only_the_standard_library():
    report = _walk("klexpr")
    outside = {top for top in report["pulled_in"] if top not in sys.stdlib_module_names and top != "klexpr"}
    assert outside == set()
    assert _project_modules_pulled_in(report, set(PROJECT_PACKAGES) - {"klexpr"}) == {}


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_selector_imports_a_service():
    selectors = sorted((ROOT / "kernellab" / "selectors").glob("*.py"))
    assert len(selectors) > 5
    importing_services = {
        path.name: sorted(m for m in _imported_modules(path) if m.startswith("kernellab.services"))
        for path in selectors
    }
    assert {name: found for name, found in importing_services.items() if found} == {}
