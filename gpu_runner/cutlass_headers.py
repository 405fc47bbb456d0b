"""Where the CUTLASS/CuTe C++ headers and examples are: PyPI's `nvidia-cutlass` wheel.

The wheel installs them under `cutlass_library/source/` (`include/cute`, `include/cutlass`,
`examples/`, `tools/`); they are found through the package's location without importing it
(importing `cutlass_library` pulls in its Python generator and its dependencies).
"""
from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def cutlass_source_root() -> Path | None:
    """The wheel's `source/` folder (include/ and examples/), or None where the wheel is absent."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "source"
        if (root / "include" / "cute").is_dir() and (root / "include" / "cutlass").is_dir():
            return root.resolve()
    return None


def cutlass_include_dir() -> Path | None:
    root = cutlass_source_root()
    return root / "include" if root is not None else None


@lru_cache(maxsize=1)
def cutlass_version() -> str | None:
    """'4.2.0' as cutlass/version.h states it, or None where the headers are absent."""
    include = cutlass_include_dir()
    if include is None:
        return None
    try:
        text = (include / "cutlass" / "version.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define CUTLASS_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p.group(1) for p in parts) if all(parts) else None


def uses_cutlass(source: str) -> bool:
    """Whether a source includes a CuTe or CUTLASS header (and so needs --expt-relaxed-constexpr)."""
    return re.search(r"^\s*(?:#|%:)\s*include\s*<\s*(?:cute|cutlass)/", source, re.M) is not None
