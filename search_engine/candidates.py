"""The Candidate dict of docs/contracts.md: building, hashing, and reading kernel signatures."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

Candidate = dict[str, Any]

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_SPACE = re.compile(r"\s+")
_AROUND_PUNCT = re.compile(r"\s*([{}()\[\];,=<>+\-*/%&|^!~?:])\s*")
_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+|__noinline__\s+)*void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)",
    re.S,
)


def make_candidate(
    source: str,
    launch: list[dict],
    *,
    temps: list[dict] | None = None,
    compile_options: list[str] | None = None,
    knobs: dict | None = None,
    name: str = "",
) -> Candidate:
    return {
        "source": source,
        "launch": [dict(step) for step in launch],
        "temps": [dict(t) for t in (temps or [])],
        "compile_options": list(compile_options or []),
        "knobs": dict(knobs) if knobs is not None else None,
        "name": name,
    }


def normalise_source(source: str) -> str:
    """Source without comments and without formatting differences (used to find duplicates)."""
    lines = []
    for line in _COMMENT.sub(" ", source).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            # Preprocessor lines keep their line structure: a define ends at the newline.
            lines.append("\n" + _SPACE.sub(" ", stripped) + "\n")
        else:
            lines.append(stripped + " ")
    text = "".join(lines)
    parts = []
    for chunk in text.split("\n"):
        if chunk.startswith("#"):
            parts.append(chunk.strip())
        else:
            chunk = _SPACE.sub(" ", chunk)
            parts.append(_AROUND_PUNCT.sub(r"\1", chunk).strip())
    return "\n".join(p for p in parts if p)


def candidate_hash(candidate: Candidate) -> str:
    """Hash of what decides the kernel's behaviour: normalised source, launch plan, temps, options."""
    key = {
        "source": normalise_source(candidate.get("source", "")),
        "launch": candidate.get("launch") or [],
        "temps": candidate.get("temps") or [],
        "compile_options": sorted(candidate.get("compile_options") or []),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def kernel_signatures(source: str) -> dict[str, list[str]]:
    """Kernel name -> its parameter declarations, for every __global__ function in the source."""
    found: dict[str, list[str]] = {}
    for match in _KERNEL.finditer(_COMMENT.sub(" ", source)):
        params = [p.strip() for p in match.group(2).split(",") if p.strip() and p.strip() != "void"]
        found[match.group(1)] = params
    return found


def launched_kernels(candidate: Candidate) -> list[str]:
    return [step["kernel"] for step in candidate.get("launch") or [] if "kernel" in step]


def signature_problem(candidate: Candidate, parent: Candidate) -> str | None:
    """A sentence saying why the candidate's kernels do not fit its launch plan, or None if they do."""
    signatures = kernel_signatures(candidate.get("source", ""))
    if not signatures:
        return "The source defines no __global__ kernel."
    parent_signatures = kernel_signatures(parent.get("source", ""))
    for step in candidate.get("launch") or []:
        if "kernel" not in step:
            continue
        name = step["kernel"]
        if name not in signatures:
            return f"The launch plan runs kernel {name!r}, which the source does not define."
        expected = len(step.get("args") or [])
        if len(signatures[name]) != expected:
            return (
                f"Kernel {name!r} takes {len(signatures[name])} parameters but the launch plan "
                f"passes {expected}."
            )
        if name in parent_signatures and len(parent_signatures[name]) != len(signatures[name]):
            return f"Kernel {name!r} changed its parameter count from the parent's."
    return None
