"""Reads of the CUTLASS/CuTe code index (built by services/cutlass.py into the data folder)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from gpu_runner.cutlass_headers import cutlass_source_root
from gpu_runner.cutlass_index import CodeHit, IndexMissing, index_facts, read_indexed_file, search_index


def cutlass_index_path() -> Path:
    return Path(settings.DATA_DIR) / "cutlass" / "index.sqlite3"


def cutlass_search(query: str, *, limit: int = 10) -> list[CodeHit]:
    """Ranked snippets for `query`; IndexMissing (a sentence) where the index is not built."""
    return search_index(cutlass_index_path(), query, limit=limit)


def cutlass_search_text(query: str, *, limit: int = 5) -> str:
    """The hits as plain text for an LLM: file, line and snippet of each, or a sentence saying why none."""
    try:
        hits = cutlass_search(query, limit=limit)
    except IndexMissing as exc:
        return str(exc)
    if not hits:
        return f"Nothing in the CUTLASS headers or examples matches {query!r}."
    return "\n\n".join(f"{hit.path}:{hit.line}\n{hit.snippet}" for hit in hits)


def cutlass_indexed_root() -> Path | None:
    """The folder the index was built from (the wheel's source/), or the installed one before any build."""
    try:
        return Path(index_facts(cutlass_index_path())["root"])
    except (IndexMissing, KeyError):
        return cutlass_source_root()


def cutlass_file_text(relative: str) -> str:
    """A whole file of the indexed headers or examples; PermissionError for anything outside them."""
    root = cutlass_indexed_root()
    if root is None:
        raise FileNotFoundError("The CUTLASS headers are not installed (pip install nvidia-cutlass).")
    return read_indexed_file(root, relative)
