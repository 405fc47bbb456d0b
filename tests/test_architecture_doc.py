"""docs/architecture.md stays true: every file it names exists, and it describes every model."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _named_paths() -> set[str]:
    paths = set()
    for code in re.findall(r"`([^`\s]+)`", DOC):
        if "/" not in code or "<" in code or code.startswith(("http", "gpu.")):
            continue
        folder, _, names = code.rpartition("/")
        # `search_engine/surrogates/{learned,llm}.py` names two files
        if names.startswith("{") and "}" in names:
            choices, suffix = names[1:].split("}", 1)
            paths.update(f"{folder}/{choice}{suffix}" for choice in choices.split(","))
        else:
            paths.add(code)
    return paths


def test_every_file_the_architecture_names_exists():
    named = _named_paths()
    assert len(named) > 40
    missing = sorted(path for path in named if not (ROOT / path.rstrip("/")).exists())
    assert missing == []


def test_the_architecture_describes_every_model():
    models = set(re.findall(r"^class (\w+)\(models\.Model\):", (ROOT / "kernellab" / "models.py").read_text(), re.M))
    assert len(models) > 10
    described = set(re.findall(r"^\| `(\w+)` \|", DOC, re.M))
    assert models - described == set()
