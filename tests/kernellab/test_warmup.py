"""A web process is warmed before its first request (kernellab/warmup.py): whatever the web tier
imports inside a function is already loaded, so serving pages loads nothing new, and neither the
first request's time nor the process's memory after a load carries one-time costs."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB_TIER = ["kernellab/views", "kernellab/selectors", "kernellab/templatetags", "kernellab/figures.py",
            "kernellab/context_processors.py", "kernellab/consumers.py"]


def lazily_imported_modules() -> set[str]:
    """Modules imported inside a function of the web tier's code."""
    found = set()
    for entry in WEB_TIER:
        path = ROOT / entry
        for file in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            if not file.exists():
                continue
            for function in ast.walk(ast.parse(file.read_text())):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Import):
                        found.update(alias.name for alias in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                        found.add(node.module)
                        # `from package import module` imports a module too (an attribute is skipped below)
                        found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


PROBE = """
import importlib, json, sys
import django
django.setup()
from kernellab.warmup import warm_process
counts = warm_process()
before = set(sys.modules)
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # `from package import attribute` names no module: skipped; anything else fails
            raise
print(json.dumps({"counts": counts, "new": sorted(set(sys.modules) - before)}))
"""


def test_the_web_tier_s_lazy_imports_are_all_loaded_by_the_warm_up(tmp_path):
    names = lazily_imported_modules()
    assert "kernellab.services.search" in names and "plotly.graph_objects" not in names  # the scan sees functions only
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update({"DJANGO_SETTINGS_MODULE": "kernellab.settings", "KERNELLAB_DATA_DIR": str(tmp_path)})
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(sorted(names))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["counts"]["templates"] >= 30
    assert result["new"] == [], (
        "imported by the web tier inside a function but not loaded by kernellab.warmup.warm_process: "
        f"{result['new'][:20]} (add the module to PAGE_MODULES)")
