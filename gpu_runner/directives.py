"""Which files a submitted source may pull in: a preprocessing-aware check of its directives.

A candidate, a hand-written child or an uploaded reference may include only headers from an
allow-list (the C/C++ standard library, the CUDA toolkit's headers, and the allow-listed include
directories, see `allowed_include_dirs`). The check reads the source as the preprocessor does before it
looks for directives: trigraphs and digraphs are translated, backslash-newlines are spliced, comments
are removed (string and character literals are respected), so `%:include`, `??=include`, `#include \\`
+ newline + path, and a directive hidden behind a comment all read as `#include`. The argument must be
a literal `<header>` (a comment closed on the line before it is the space it is to the preprocessor, unless the
source has trigraphs): a quoted path, a macro (`#define P "..." / #include P`), `..`, an absolute path,
`#import`, `#include_next`, `#embed` and `__has_include` of a header outside the list are refused.

This is the second of three layers (docs/security.md): every
compile also runs in a sandbox that sees only the toolkit and the allowed include directories, and
compiler messages about other files are stripped of quoted text.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_TRIGRAPHS = {"??=": "#", "??/": "\\", "??'": "^", "??(": "[", "??)": "]", "??!": "|", "??<": "{", "??>": "}",
              "??-": "~"}
_TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
_TRAILING_BACKSLASH = re.compile(r"\\[ \t\f\v]*$")
_DIRECTIVE = re.compile(r"^[ \t\f\v]*(?:#|%:)[ \t\f\v]*(?P<name>[A-Za-z_]\w*)?(?P<rest>.*)$", re.M)
_HAS_INCLUDE = re.compile(r"\b__has_include(?:_next)?\b\s*\(\s*(?P<arg>[^)]*)\)")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9_][\w.+\-]*(?:/[A-Za-z0-9_][\w.+\-]*)*$")

# Header directories of the toolkit and its libraries that a kernel may use.
_ALLOWED_DIRS = {"cuda", "cub", "thrust", "cooperative_groups", "nv", "crt", "cute", "cutlass", "cuda_pipeline",
                 "cccl", "libcudacxx"}
_STANDARD = {
    # C++ standard library
    "algorithm", "array", "atomic", "bit", "bitset", "cassert", "cctype", "cerrno", "cfenv", "cfloat", "chrono",
    "cinttypes", "climits", "clocale", "cmath", "complex", "concepts", "cstdarg", "cstddef", "cstdint", "cstdio",
    "cstdlib", "cstring", "ctime", "cwchar", "functional", "initializer_list", "iterator", "limits", "memory",
    "new", "numeric", "numbers", "optional", "ratio", "span", "tuple", "type_traits", "typeinfo", "utility",
    "variant",
    # C library
    "assert.h", "ctype.h", "errno.h", "float.h", "inttypes.h", "limits.h", "math.h", "stdarg.h", "stdbool.h",
    "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "time.h",
}
_CUDA_HEADER = re.compile(r"^(?:cuda|cuda_[\w]+|cuComplex|math_constants|math_functions|mma|sm_\d+_[\w]+|"
                          r"vector_types|vector_functions|device_[\w]+|host_defines|builtin_types|"
                          r"cooperative_groups|curand[\w]*|texture_[\w]+|surface_[\w]+|channel_descriptor|"
                          r"driver_types|library_types|nvfunctional|cudaTypedefs|cublas[\w]*)\.(?:h|hpp|cuh)$")


def allowed_include_dirs() -> list[Path]:
    """The header folders beyond the toolkit that sources may read, in search order: the CUTLASS/CuTe
    headers of the `nvidia-cutlass` wheel, then KERNELLAB_INCLUDE_DIR (folders separated by os.pathsep)."""
    from .cutlass_headers import cutlass_include_dir

    dirs = [cutlass_include_dir()]
    value = os.environ.get("KERNELLAB_INCLUDE_DIR", "").strip()
    dirs += [Path(part).resolve() for part in value.split(os.pathsep) if part.strip()]
    unique: list[Path] = []
    for directory in dirs:
        if directory is not None and directory not in unique:
            unique.append(directory)
    return unique


@lru_cache(maxsize=64)
def _in_extra_dir(root: str, name: str) -> bool:
    path = (Path(root) / name).resolve()
    return path.is_file() and Path(root) in path.parents


# Headers a torch C++/CUDA extension (load_inline) needs on top of a kernel's; allowed only there.
_EXTENSION_DIRS = {"torch", "ATen", "c10", "pybind11", "caffe2"}
_EXTENSION_STANDARD = {"vector", "string", "map", "unordered_map", "set", "unordered_set", "iostream", "sstream",
                       "stdexcept", "mutex", "thread", "list", "deque", "queue", "stack", "ostream", "fstream",
                       "iomanip", "string_view", "cuda_fp16.h", "cuda_bf16.h"}


def header_allowed(name: str, *, extension: bool = False) -> bool:
    if not _HEADER_NAME.match(name) or ".." in name.split("/"):
        return False
    if extension and (name.split("/", 1)[0] in _EXTENSION_DIRS or name in _EXTENSION_STANDARD):
        return True
    if name in _STANDARD or _CUDA_HEADER.match(name):
        return True
    if "/" in name and name.split("/", 1)[0] in _ALLOWED_DIRS:
        return True
    return any(_in_extra_dir(str(extra), name) for extra in allowed_include_dirs())


def translate(source: str, *, comments: bool = False) -> str:
    """The source as the preprocessor sees it when it looks for directives (translation phases 1-3).

    A logical line made of several physical lines is followed by the newlines its splices removed, so
    every directive keeps the line number of its first physical line.
    """
    text = _TRIGRAPH.sub(lambda m: _TRIGRAPHS[m.group(0)], source.replace("\r\n", "\n"))
    logical, current, spliced = [], "", 0
    for line in text.split("\n"):
        match = _TRAILING_BACKSLASH.search(line)
        if match:
            current += line[:match.start()]
            spliced += 1
            continue
        logical.append(current + line + "\n" * spliced)
        current, spliced = "", 0
    if current or spliced:
        logical.append(current + "\n" * spliced)
    joined = "\n".join(logical)
    return joined if comments else _strip_comments(joined)


def _strip_comments(text: str) -> str:
    """Each comment becomes one space, as in translation phase 3; literals (raw strings too) are kept.

    A block comment's newlines are moved to the end of the line it closes on, so a directive written
    across a comment (`#/* ... */include`) reads as one line, while later lines keep their numbers.
    """
    out: list[str] = []
    held = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            out.append("\n" * (1 + held))
            held = 0
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            held += text.count("\n", i, end)
            out.append(" ")
            i = end
        elif c == '"' and _raw_string_starts(text, i) and text.find("(", i) > i:
            paren = text.find("(", i)
            close = text.find(")" + text[i + 1:paren] + '"', paren)
            end = n if close < 0 else close + paren - i + 1
            out.append(text[i:end])
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1] if j < n and text[j] == c else text[i:j])
            i = j + 1 if j < n and text[j] == c else j
        else:
            j = i + 1
            while j < n and text[j] not in "\n/\"'":
                j += 1
            out.append(text[i:j])
            i = j
    return "".join(out)


def _raw_string_starts(text: str, quote: int) -> bool:
    start = quote
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_") and quote - start < 4:
        start -= 1
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        return False
    return text[start:quote] in ("R", "u8R", "uR", "UR", "LR")


# Block comments before an #include's argument, each closed on the directive's line. The preprocessor
# replaces each by a space before it reads the directive (phase 3), so `#include /* CuTe */
# <cute/tensor.hpp>` includes <cute/tensor.hpp>; a comment ends at the first `*/` (they do not nest).
_LEADING_COMMENTS = re.compile(r"^(?:\s*/\*.*?\*/)*\s*")


def _include_argument(rest: str, *, comments: bool = False) -> tuple[str | None, str]:
    """(header name, problem) for the text after `#include`; `comments`: block comments before the
    header name are read as spaces (see `find_forbidden_directive` for when that is safe)."""
    rest = (_LEADING_COMMENTS.sub("", rest, count=1) if comments else rest).strip()
    if rest.startswith("<") and ">" in rest:
        return rest[1:rest.index(">")].strip(), ""
    if rest.startswith('"'):
        return None, "includes a file by a quoted path (only <...> headers from the allow-list are allowed)"
    if not rest:
        return None, "has an #include without a header name"
    if rest.startswith("/*"):
        return None, ("has a comment between #include and its header name that cannot be read safely (one "
                      "that goes on past the line, or a source with trigraphs such as ??/): write the <header> "
                      "right after #include")
    if re.match(r"[A-Za-z_]", rest):
        return None, "includes a file named by a macro (only a literal <header> is allowed)"
    return None, (f"has an #include whose argument, {rest[:40]!r}, is not a <header> name "
                  "(only a literal <header> is allowed)")


@dataclass(frozen=True)
class Refusal:
    line: int
    reason: str


def check_directives(source: str) -> str | None:
    """A sentence naming the first directive that could read a file outside the allow-list, or None."""
    refusal = find_forbidden_directive(source)
    return refusal.reason if refusal else None


def find_forbidden_directive(source: str, *, extension: bool = False) -> Refusal | None:
    """`extension`: the source is built as a torch extension, which may also include torch's own headers."""
    # The spliced text with comments kept is checked too: a lexing slip can then only refuse more.
    # There a comment closed on the #include's line before its <header> is read as the space it is, as
    # long as the source has no trigraph: nvcc's C++17 preprocessor leaves `??/` alone while `translate`
    # makes it a backslash, so around a trigraph the two could end a comment in different places.
    plain = _TRIGRAPH.search(source) is None
    for text, comments in ((translate(source), False), (translate(source, comments=True), plain)):
        refusal = _check_text(text, extension, comments=comments)
        if refusal:
            return refusal
    return None


def _check_text(text: str, extension: bool = False, *, comments: bool = False) -> Refusal | None:
    for match in _DIRECTIVE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        name, rest = match.group("name") or "", match.group("rest")
        if name in ("include_next", "import", "embed"):
            return Refusal(line, f"The source uses #{name} at line {line}; only #include <header> from the "
                                 "allow-list is allowed.")
        if name == "pragma" and re.match(r"\s*(?:embed|include)\b", rest):
            return Refusal(line, f"The source uses a file-reading #pragma at line {line}.")
        if name == "include":
            header, problem = _include_argument(rest, comments=comments)
            if problem:
                return Refusal(line, f"The source {problem} at line {line}.")
            if not header_allowed(header, extension=extension):
                return Refusal(line, f"The source includes <{header}> at line {line}, which is not an allowed "
                                     "header (the C/C++ standard library and the CUDA toolkit's headers).")
    for match in _HAS_INCLUDE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        header, problem = _include_argument(match.group("arg"), comments=comments)
        if problem or not header_allowed(header, extension=extension):
            return Refusal(line, f"The source asks __has_include about a file outside the allowed headers at "
                                 f"line {line}.")
    return None


def included_headers(source: str) -> list[str]:
    """The `<header>` names a source includes or asks `__has_include` about, in order, as the
    preprocessor reads its directives (comments and splices handled as in `find_forbidden_directive`).
    A directive whose argument is not a literal <header> is left out; the directive check refuses it."""
    text = translate(source)
    names: list[str] = []
    for match in _DIRECTIVE.finditer(text):
        if (match.group("name") or "") in ("include", "include_next", "import"):
            header, _ = _include_argument(match.group("rest"))
            if header and header not in names:
                names.append(header)
    for match in _HAS_INCLUDE.finditer(text):
        header, _ = _include_argument(match.group("arg"))
        if header and header not in names:
            names.append(header)
    return names
