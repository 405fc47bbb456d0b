"""Where each table and key of a TOML text is written, so that a spec error can name its line.

tomllib gives values without positions; this scanner reads the text line by line, following table
headers (`[a.b]`, `[[args]]` with its running index), keys (`name = ...`, dotted keys) and the keys
of one-line inline tables (`default = { N = 1024 }`). It never decides validity: tomllib does.
"""
from __future__ import annotations

import re

_BARE = r'[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\''
_HEADER = re.compile(rf'^\s*(\[\[|\[)\s*((?:{_BARE})(?:\s*\.\s*(?:{_BARE}))*)\s*\]\]?')
_KEY = re.compile(rf'^\s*((?:{_BARE})(?:\s*\.\s*(?:{_BARE}))*)\s*=(.*)$')
_STRINGS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_INLINE_KEY = re.compile(r'([{,]\s*)([A-Za-z0-9_-]+)\s*=')
_FIELD_SEGMENT = re.compile(r"([A-Za-z0-9_-]+)|\[(\d+)\]")
_TOML_ERROR_LINE = re.compile(r"at line (\d+)")

Path = tuple


def toml_positions(text: str) -> dict[Path, int]:
    """{path: 1-based line} for every table, array-of-tables entry and key; paths index arrays of
    tables: ("args", 2, "role")."""
    positions: dict[Path, int] = {}
    table: Path = ()
    aot_index: dict[Path, int] = {}
    open_brackets = 0
    in_multiline: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        bare = _STRINGS.sub('""', line).split("#", 1)[0]
        for quote in ('"""', "'''"):
            if bare.count(quote) % 2 == 1:
                in_multiline = quote
        if open_brackets > 0:
            open_brackets = max(0, open_brackets + _depth_change(bare))
            continue
        header = _HEADER.match(bare)
        if header and not _KEY.match(bare):
            keys = _split_keys(header.group(2))
            resolved = _resolve(tuple(keys), aot_index)
            if header.group(1) == "[[":
                unresolved = tuple(keys)
                aot_index[unresolved] = aot_index.get(unresolved, -1) + 1
                for deeper in [k for k in aot_index if len(k) > len(unresolved) and k[:len(unresolved)] == unresolved]:
                    del aot_index[deeper]
                positions.setdefault(resolved, number)
                resolved = resolved + (aot_index[unresolved],)
            positions.setdefault(resolved, number)
            table = resolved
            continue
        key = _KEY.match(bare)
        if key:
            path = table
            for part in _split_keys(key.group(1)):
                path = path + (part,)
                positions.setdefault(path, number)
            rest = key.group(2)
            if "{" in rest:
                for match in _INLINE_KEY.finditer(rest):
                    positions.setdefault(path + (match.group(2),), number)
            open_brackets = max(0, _depth_change(rest))
    return positions


def field_line(text: str, field: str, positions: dict[Path, int] | None = None) -> int | None:
    """The line of the deepest part of a SpecError field that is written in `text`, e.g.
    "launch[0].args[1]" -> the line of `args = ...` in the first [[launch]]."""
    if field == "problem.toml":
        return None
    positions = toml_positions(text) if positions is None else positions
    path: list = []
    for name, index in _FIELD_SEGMENT.findall(re.sub(r"\s*\('[^']*'\)", "", field)):
        path.append(int(index) if index else name)
    while path:
        if tuple(path) in positions:
            return positions[tuple(path)]
        path.pop()
    return None


def syntax_error_line(message: str, text: str) -> int | None:
    """The line tomllib names in a TOMLDecodeError message ("at end of document" is the last line)."""
    match = _TOML_ERROR_LINE.search(message)
    if match:
        return int(match.group(1))
    if "end of document" in message:
        return max(1, len(text.splitlines()))
    return None


def _split_keys(dotted: str) -> list[str]:
    return [part.strip().strip("\"'") for part in re.findall(_BARE, dotted)]


def _resolve(keys: Path, aot_index: dict[Path, int]) -> Path:
    resolved: Path = ()
    for i, key in enumerate(keys):
        resolved = resolved + (key,)
        prefix = keys[:i + 1]
        if prefix in aot_index and i < len(keys) - 1:
            resolved = resolved + (aot_index[prefix],)
    return resolved


def _depth_change(bare: str) -> int:
    return bare.count("[") + bare.count("{") - bare.count("]") - bare.count("}")
