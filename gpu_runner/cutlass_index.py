"""A full-text index of the CUTLASS/CuTe headers and examples (SQLite FTS5, standard library only).

Files are cut into windows of `WINDOW` lines and indexed with their path and
their identifiers split into words (`make_tiled_copy`, `TiledCopy` -> `make tiled copy`), so a query in
words ("tiled copy", "mma atom sm90") finds the code that spells it as identifiers. A query that is one
identifier (`local_tile`, `SM90_TMA_LOAD`, `cute::local_tile`) finds the windows that spell it exactly,
the one defining it first (`search_index`). A hit is the window's best line (one that spells the
identifier, else the one holding most query words) with a few lines around it.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

WINDOW = 40
SNIPPET_LINES = 9
INDEXED_SUFFIXES = {".h", ".hpp", ".cuh", ".cu", ".cpp", ".inl", ".py", ".md"}
INDEXED_FOLDERS = ("include", "examples")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z]|\d|\b)|[A-Z]?[a-z]+|[A-Z]+|\d+")
_QUERY_WORD = re.compile(r"[A-Za-z0-9]+")
SCHEMA_VERSION = "1"


class IndexMissing(RuntimeError):
    """The index has not been built (manage.py cutlass_index)."""


@dataclass(frozen=True)
class CodeHit:
    path: str          # relative to the indexed root, e.g. include/cute/atom/copy_atom.hpp
    line: int          # 1-based line of the best-matching line
    first_line: int    # 1-based line of the snippet's first line
    snippet: str
    score: float


def words_of(text: str) -> str:
    """Identifiers split into lower-case words: `SM90_64x64x16_F16F16F16_SS` -> `sm 90 64 x 64 ...`."""
    out = []
    for identifier in _IDENTIFIER.findall(text):
        for part in identifier.split("_"):
            out += [w.lower() for w in _CAMEL.findall(part)]
    return " ".join(out)


def query_words(query: str) -> list[str]:
    return [w for w in words_of(" ".join(_QUERY_WORD.findall(query))).split() if w]


def indexed_files(root: Path) -> list[Path]:
    files = []
    for folder in INDEXED_FOLDERS:
        files += [p for p in sorted((root / folder).rglob("*")) if p.is_file() and p.suffix in INDEXED_SUFFIXES]
    return files


def build_index(root: Path, database: Path, *, version: str = "") -> int:
    """Index every header and example under `root` into `database` (replaced); returns the file count."""
    database.parent.mkdir(parents=True, exist_ok=True)
    partial = database.with_name(database.name + ".partial")
    partial.unlink(missing_ok=True)
    connection = sqlite3.connect(partial)
    try:
        connection.execute("CREATE VIRTUAL TABLE windows USING fts5(path, words, body, line UNINDEXED, "
                           "tokenize = 'unicode61')")
        connection.execute("CREATE TABLE facts (name TEXT PRIMARY KEY, value TEXT)")
        files = indexed_files(root)
        for path in files:
            relative = path.relative_to(root).as_posix()
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            path_words = words_of(relative.replace("/", " ").replace(".", " "))
            for start in range(0, max(len(lines), 1), WINDOW):
                body = "\n".join(lines[start:start + WINDOW])
                connection.execute("INSERT INTO windows (path, words, body, line) VALUES (?, ?, ?, ?)",
                                   (path_words, words_of(body), body, f"{relative}:{start + 1}"))
                if start + WINDOW >= len(lines):
                    break
        connection.executemany("INSERT INTO facts VALUES (?, ?)",
                               [("root", str(root)), ("version", version), ("schema", SCHEMA_VERSION),
                                ("files", str(len(files)))])
        connection.commit()
    finally:
        connection.close()
    partial.replace(database)
    return len(files)


def index_facts(database: Path) -> dict[str, str]:
    if not database.is_file():
        raise IndexMissing("The CUTLASS index has not been built yet (run manage.py cutlass_index).")
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        return dict(connection.execute("SELECT name, value FROM facts"))


def search_index(database: Path, query: str, *, limit: int = 10) -> list[CodeHit]:
    """Ranked hits for `query`.

    A query that is one identifier of several words (`local_tile`, `SM90_TMA_LOAD`, `cute::local_tile`)
    finds the windows that spell it: first those holding it as a whole token (the qualified name, then
    its last part), then those holding it inside a longer identifier (`SM90_TMA_LOAD_MULTICAST`); a hit's
    line is one that spells it. Otherwise, or where nothing spells it, the query is words: every word
    required first, any word if that finds nothing."""
    if limit < 1:
        raise ValueError(f"The number of hits asked for must be 1 or more, not {limit}.")
    # A missing index is said first, whatever the query: nothing can be found before it is built.
    if not database.is_file():
        raise IndexMissing("The CUTLASS index has not been built yet (run manage.py cutlass_index).")
    words = query_words(query)
    if not words:
        return []
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        needles = _identifier_needles(query)
        if needles:
            hits = _identifier_hits(connection, needles, limit)
            if hits:
                return hits
        quoted = [f'"{w}"' for w in dict.fromkeys(words)]
        rows = []
        for match in (" AND ".join(quoted), " OR ".join(quoted)):
            # bm25 weights: a word in the file's path counts most, then in identifiers, then in the text.
            rows = connection.execute(
                "SELECT line, body, bm25(windows, 20.0, 2.0, 1.0) AS rank FROM windows WHERE windows MATCH ? "
                "ORDER BY rank LIMIT ?", (f"{{path words body}} : ({match})", limit * 4)).fetchall()
            if rows:
                break
    hits: list[CodeHit] = []
    seen: set[str] = set()
    for located, body, rank in rows:
        path, start = located.rsplit(":", 1)
        if path in seen:
            continue
        seen.add(path)
        hits.append(_hit(path, int(start), body, set(words), -rank))
        if len(hits) == limit:
            break
    return hits


_IDENTIFIER_QUERY = re.compile(r"^(?:::)?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*$")


def _identifier_needles(query: str) -> list[tuple[str, str]]:
    """(text, how: "defines", "whole" token or "part" of a longer one) to look for, best first, when
    `query` is one identifier of several words; [] for anything else (words, `cp.async`, or a single
    word, which the word search matches as it is)."""
    text = query.strip()
    if not _IDENTIFIER_QUERY.match(text) or len(words_of(text).split()) < 2:
        return []
    text = text.lstrip(":")
    last = text.rsplit("::", 1)[-1]
    needles = [(last, "defines")]
    if "::" in text:
        needles.append((text, "whole"))
    needles += [(last, "whole"), (last, "part")]
    return needles


def _spelling(needle: str, how: str) -> re.Pattern:
    """Where a window spells `needle`: a definition (CUTLASS's style: a function's name at the start of
    its line; `struct NAME` not followed by `;`, `,`, `>` or `=`, which a declaration or a template
    parameter is; `using NAME =`; `#define NAME`), a whole token, or any part of an identifier."""
    escaped = re.escape(needle)
    if how == "defines":
        return re.compile(rf"^{escaped}\s*\(|^\s*(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+"
                          rf"{escaped}\b(?!\s*[;,>=])|^\s*using\s+{escaped}\s*=|^\s*#\s*define\s+{escaped}\b", re.M)
    if how == "whole":
        return re.compile(rf"(?<![A-Za-z0-9_]){escaped}(?![A-Za-z0-9_])")
    return re.compile(escaped)


def _identifier_hits(connection: sqlite3.Connection, needles: list[tuple[str, str]], limit: int) -> list[CodeHit]:
    """Hits for each needle in turn (an FTS phrase of its words, then its spelling), one per file."""
    patterns: dict[str, re.Pattern] = {}

    def spells(body: str, key: str) -> int:
        return 1 if patterns[key].search(body) else 0

    connection.create_function("kl_spells", 2, spells, deterministic=True)
    hits: list[CodeHit] = []
    seen: set[str] = set()
    for needle, how in needles:
        key = f"{how}:{needle}"
        patterns[key] = _spelling(needle, how)
        phrase = '"' + words_of(needle) + '"'
        rows = connection.execute(
            "SELECT line, body, bm25(windows, 20.0, 2.0, 1.0) AS rank FROM windows WHERE windows MATCH ? "
            "AND instr(body, ?) > 0 AND kl_spells(body, ?) ORDER BY rank LIMIT ?",
            (f"{{path words body}} : {phrase}", needle, key, limit * 4)).fetchall()
        for located, body, rank in rows:
            path, start = located.rsplit(":", 1)
            if path in seen:
                continue
            seen.add(path)
            hits.append(_hit(path, int(start), body, set(words_of(needle).split()), -rank, patterns[key]))
            if len(hits) == limit:
                return hits
    return hits


def _hit(path: str, start: int, body: str, words: set[str], score: float,
         spelt: re.Pattern | None = None) -> CodeHit:
    """The window's best line (the first that spells the identifier as `spelt` finds it, else the one
    holding most query words) with a few lines around it."""
    lines = body.split("\n")
    best = next((i for i, line in enumerate(lines) if spelt.search(line)), None) if spelt is not None else None
    if best is None:
        counts = [len(words & set(words_of(line).split()) | {w for w in words if w in line.lower()})
                  for line in lines]
        best = max(range(len(lines)), key=lambda i: (counts[i], -i)) if lines else 0
    first = max(0, best - SNIPPET_LINES // 3)
    return CodeHit(path=path, line=start + best, first_line=start + first,
                   snippet="\n".join(lines[first:first + SNIPPET_LINES]), score=round(score, 3))


def read_indexed_file(root: Path, relative: str) -> str:
    """The text of a file inside the indexed folders of `root`; anything else is refused."""
    if not relative or "\x00" in relative or relative.startswith(("/", "\\")):
        raise PermissionError("Only files inside the CUTLASS headers and examples can be shown.")
    resolved_root = root.resolve()
    path = (resolved_root / relative).resolve()
    inside = any(path.is_relative_to(resolved_root / folder) for folder in INDEXED_FOLDERS)
    if not inside or path.suffix not in INDEXED_SUFFIXES:
        raise PermissionError("Only files inside the CUTLASS headers and examples can be shown.")
    if not path.is_file():
        raise FileNotFoundError(f"{relative} is not a file of the CUTLASS headers or examples.")
    return path.read_text(encoding="utf-8", errors="replace")
