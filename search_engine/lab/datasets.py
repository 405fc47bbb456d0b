# Over 400 lines on purpose: the row layout, its validation and its readers and writers change together.
"""Datasets of measured comparisons, in the column layout of the GPU Forecasters public sets.

Two kinds of row:
- a *comparison* (the eval-set layout): anchor (reference) code, candidate code, hardware, the
  measured speedup S = T_anchor / T_candidate and its true bin, the problem ("pack");
- a *pair* (the discovery-pairs layout): parent code, child code, hardware, the child's speedup over
  its parent ("g_speedup") and its true bin, the problem ("problem_id").

Every row also says where it came from ("source": kernellab-db, recorded-h200, imported:<file>, ...).
Optional KernelLab columns carry what the feature-based surrogates read (launch plans, compiler
facts, the hardware as a dict, problem sizes and roofline formulas, the reference's time); a row
from elsewhere without them still works for every surrogate, with less to go on.

Files are JSON Lines (optionally gzip-compressed) or CSV (JSON-valued columns as JSON text).
Reading is all-or-nothing: every row is checked and a file with any bad row raises DatasetError
listing each problem as "row N, field F: what is wrong"; nothing is returned half-read.

Reading is bounded: rows are checked as they are read (a bad row is not kept); at most MAX_ROWS rows of at
most MAX_ROW_CHARS each (and MAX_COLUMNS CSV columns) are read; at most MAX_ERRORS problems are kept and the
rest counted; read_dataset(max_bytes=...) and check_decompressed_size stop at a number of decompressed bytes
(UPLOAD_MAX_BYTES for a file from the browser). A file past a limit is refused with a sentence naming it.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import math
import os
import random
import reprlib
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from search_engine.bins import DEFAULT_BINS, BinTable
from search_engine.surrogates.base import ForecastRequest

COMPARISON = "comparison"
PAIR = "pair"

# Columns of the public sets, in their order; "source" is KernelLab's provenance column.
COMPARISON_FIELDS = ("comparison_id", "pack", "anchor_code", "candidate_code", "hardware",
                     "aggregated_speedup", "true_bin", "source", "source_id")
PAIR_FIELDS = ("pair_id", "problem_id", "parent_code", "child_code", "hardware", "g_speedup", "true_bin",
               "parent_node_id", "child_node_id", "source", "source_id")

# Other names accepted on import for the same columns (CSV files from elsewhere).
ALIASES = {
    COMPARISON: {"id": "comparison_id", "problem": "pack", "reference_code": "anchor_code",
                 "speedup": "aggregated_speedup", "gpu": "hardware"},
    PAIR: {"id": "pair_id", "problem": "problem_id", "pack": "problem_id", "speedup": "g_speedup",
           "ratio": "g_speedup", "gpu": "hardware"},
}

# Optional KernelLab columns: name -> expected JSON type.
_LIST, _DICT, _NUMBER, _TEXT = "a JSON list", "a JSON object", "a number", "text"
OPTIONAL_FIELDS = {
    COMPARISON: {
        "anchor_launch": _LIST, "candidate_launch": _LIST, "candidate_temps": _LIST,
        "anchor_compile_options": _LIST, "candidate_compile_options": _LIST, "knobs": _DICT,
        "hardware_spec": _DICT, "compiler_facts": _DICT, "anchor_compiler_facts": _DICT,
        "reference_ms": _NUMBER, "problem_sizes": _DICT, "problem_roofline": _DICT,
        "problem_description": _TEXT, "source_search": _TEXT, "internal_experiment": _TEXT,
    },
    PAIR: {
        "anchor_code": _TEXT, "anchor_launch": _LIST, "parent_launch": _LIST, "child_launch": _LIST,
        "parent_compile_options": _LIST, "child_compile_options": _LIST,
        "parent_speedup": _NUMBER, "child_speedup": _NUMBER, "hardware_spec": _DICT,
        "parent_compiler_facts": _DICT, "child_compiler_facts": _DICT, "reference_ms": _NUMBER,
        "problem_sizes": _DICT, "problem_roofline": _DICT, "problem_description": _TEXT,
        "benchmark_family": _TEXT, "source_search": _TEXT, "internal_experiment": _TEXT,
    },
}
_REQUIRED = {
    COMPARISON: ("comparison_id", "pack", "anchor_code", "candidate_code", "hardware", "aggregated_speedup"),
    PAIR: ("pair_id", "problem_id", "parent_code", "child_code", "hardware", "g_speedup"),
}
_SPEEDUP = {COMPARISON: "aggregated_speedup", PAIR: "g_speedup"}
_ID = {COMPARISON: "comparison_id", PAIR: "pair_id"}
_PROBLEM = {COMPARISON: "pack", PAIR: "problem_id"}

# Limits of one read. The real sets fit them with room: `export_dataset --from records` of the bundled
# recordings writes 13,751 comparison rows (174 MB) and 99,672 pairs (2.0 GB, 20 KB a pair); a CUDA-L1 file of
# ../shared/datasets holds 125 rows a GPU; the held-out benchmark 351 rows.
MAX_ROWS = 200_000
# Characters of one row (a JSON Lines line, a CSV record): the longest real row is under 100 KB (a CUDA-L1
# solution; the export's rows are under 26 KB) and a kernel source may be 256 KiB. Parsed, a long row of many
# small values takes about 14 times its text in memory, so the row is refused before it is parsed.
MAX_ROW_CHARS = 4 * 1024 * 1024
# Columns of a CSV file (the layouts name 9 to 29; a record becomes a dict of the header's width).
MAX_COLUMNS = 1000
# Problems kept for the message (the lab page lists 200); the others are only counted.
MAX_ERRORS = 200
# The file names a dataset may have, in one list for the command line and the /lab/ form (upper case too).
DATASET_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".csv", ".csv.gz")
DATASET_SUFFIXES_TEXT = ".jsonl, .jsonl.gz or .csv file (also .ndjson, .ndjson.gz and .csv.gz)"
# Decompressed bytes of a file from the browser (the upload's own cap is on the bytes sent, compressed).
UPLOAD_MAX_BYTES = 64 * 1024 * 1024
# A CSV cell may hold a whole kernel source (256 KiB elsewhere) or JSON, as long as a row may be; the csv
# module's default is 128 KiB.
CSV_FIELD_LIMIT = MAX_ROW_CHARS
# Ignored column names remembered (a file may carry any number of them).
_MAX_IGNORED = 100
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3


@dataclass(frozen=True)
class RowError:
    row: int      # 1-based data row (for CSV, the header is row 0)
    field: str
    message: str

    def __str__(self) -> str:
        return f"row {self.row}, field '{self.field}': {self.message}" if self.field else \
            f"row {self.row}: {self.message}"


class DatasetError(ValueError):
    """A file that cannot be read as a dataset; `errors` lists the bad rows and fields (the first MAX_ERRORS
    of them when reading), `total` counts them all."""

    def __init__(self, path: str, errors: list[RowError], summary: str = "", total: int | None = None):
        self.path = path
        self.errors = errors
        self.total = total = max(len(errors), total or 0)
        # every problem kept is printed, so that "the first N are listed" is what a terminal shows too
        kept = errors[:MAX_ERRORS]
        shown = "\n".join(f"  {e}" for e in kept)
        more = f"\n  ... and {total - len(kept):,} more" if total > len(kept) else ""
        listed = f" (the first {len(kept)} are listed)" if total > len(kept) else ""
        head = summary or f"{path}: {total:,} problem{'s' if total != 1 else ''}{listed}; nothing was imported."
        super().__init__(f"{head}\n{shown}{more}" if errors else head)


@dataclass
class Dataset:
    kind: str           # COMPARISON or PAIR
    rows: list[dict]
    ignored_fields: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def problems(self) -> list[str]:
        return sorted({row_problem(r) for r in self.rows})


# ---- row helpers -------------------------------------------------------------------------------

def row_kind(row: dict) -> str:
    return PAIR if any(k in row for k in ("pair_id", "parent_code", "child_code", "g_speedup")) else COMPARISON


def row_speedup(row: dict) -> float:
    return float(row[_SPEEDUP[row_kind(row)]])


def row_problem(row: dict) -> str:
    return str(row[_PROBLEM[row_kind(row)]])


def row_id(row: dict) -> str:
    return str(row[_ID[row_kind(row)]])


def comparison_row(*, comparison_id: str, pack: str, anchor: dict, candidate: dict, hardware: dict | str,
                   speedup: float, source: str, source_id: str = "", bins: BinTable = DEFAULT_BINS,
                   compiler_facts: dict | None = None, anchor_compiler_facts: dict | None = None,
                   reference_ms: float | None = None, problem: dict | None = None) -> dict:
    """One comparison row from Candidate dicts (docs/contracts.md) and a measured speedup."""
    hw = hardware if isinstance(hardware, dict) else {"name": str(hardware)}
    problem = problem or {}
    row = {
        "comparison_id": comparison_id, "pack": pack, "anchor_code": anchor["source"],
        "candidate_code": candidate["source"], "hardware": str(hw.get("name") or "unknown GPU"),
        "aggregated_speedup": float(speedup), "true_bin": bins.bin_of(speedup), "source": source,
        "source_id": source_id,
        "anchor_launch": list(anchor.get("launch") or []), "candidate_launch": list(candidate.get("launch") or []),
        "candidate_temps": list(candidate.get("temps") or []),
        "anchor_compile_options": list(anchor.get("compile_options") or []),
        "candidate_compile_options": list(candidate.get("compile_options") or []),
        "knobs": candidate.get("knobs"), "hardware_spec": dict(hw),
        "compiler_facts": compiler_facts or {}, "anchor_compiler_facts": anchor_compiler_facts or {},
        "reference_ms": reference_ms, "problem_sizes": dict(problem.get("sizes") or {}),
        "problem_roofline": dict(problem.get("roofline") or {}),
        "problem_description": problem.get("description") or "",
    }
    return {k: v for k, v in row.items() if v is not None}


def pair_row(*, pair_id: str, problem_id: str, parent: dict, child: dict, hardware: dict | str,
             parent_speedup: float, child_speedup: float, source: str, source_id: str = "",
             parent_node_id: str = "", child_node_id: str = "", anchor: dict | None = None,
             bins: BinTable = DEFAULT_BINS, parent_compiler_facts: dict | None = None,
             child_compiler_facts: dict | None = None, reference_ms: float | None = None,
             problem: dict | None = None) -> dict:
    """One parent -> child row; g_speedup = child's speedup over its parent (both against the anchor)."""
    hw = hardware if isinstance(hardware, dict) else {"name": str(hardware)}
    ratio = float(child_speedup) / float(parent_speedup)
    problem = problem or {}
    row = {
        "pair_id": pair_id, "problem_id": problem_id, "parent_code": parent["source"], "child_code": child["source"],
        "hardware": str(hw.get("name") or "unknown GPU"), "g_speedup": ratio, "true_bin": bins.bin_of(ratio),
        "parent_node_id": parent_node_id, "child_node_id": child_node_id, "source": source, "source_id": source_id,
        "anchor_code": anchor["source"] if anchor else None,
        "anchor_launch": list(anchor.get("launch") or []) if anchor else None,
        "parent_launch": list(parent.get("launch") or []), "child_launch": list(child.get("launch") or []),
        "parent_compile_options": list(parent.get("compile_options") or []),
        "child_compile_options": list(child.get("compile_options") or []),
        "parent_speedup": float(parent_speedup), "child_speedup": float(child_speedup), "hardware_spec": dict(hw),
        "parent_compiler_facts": parent_compiler_facts or {}, "child_compiler_facts": child_compiler_facts or {},
        "reference_ms": reference_ms, "problem_sizes": dict(problem.get("sizes") or {}),
        "problem_roofline": dict(problem.get("roofline") or {}),
        "problem_description": problem.get("description") or "",
    }
    return {k: v for k, v in row.items() if v is not None}


def _candidate(code: str, launch, compile_options=None, temps=None, knobs=None, name: str = "") -> dict:
    return {"source": code, "launch": list(launch or []), "temps": list(temps or []),
            "compile_options": list(compile_options or []), "knobs": knobs, "name": name}


def _problem_context(row: dict, name: str) -> dict:
    problem = {"name": name}
    if row.get("problem_description"):
        problem["description"] = row["problem_description"]
    if row.get("problem_sizes"):
        problem["sizes"] = dict(row["problem_sizes"])
    if row.get("problem_roofline"):
        problem["roofline"] = dict(row["problem_roofline"])
    return problem


def _hardware(row: dict) -> dict:
    spec = dict(row.get("hardware_spec") or {})
    spec.setdefault("name", row.get("hardware"))
    return spec


def row_request(row: dict) -> ForecastRequest:
    """The ForecastRequest a surrogate sees for a comparison row: anchor vs candidate."""
    if row_kind(row) == PAIR:
        return pair_request(row)
    return ForecastRequest(
        reference=_candidate(row["anchor_code"], row.get("anchor_launch"), row.get("anchor_compile_options"),
                             name="reference"),
        candidate=_candidate(row["candidate_code"], row.get("candidate_launch"),
                             row.get("candidate_compile_options"), row.get("candidate_temps"), row.get("knobs"),
                             name=row_id(row)),
        hardware=_hardware(row), problem=_problem_context(row, row["pack"]),
        compiler_facts=row.get("compiler_facts") or None,
        reference_compiler_facts=row.get("anchor_compiler_facts") or None,
        reference_ms=row.get("reference_ms"),
    )


def pair_request(row: dict) -> ForecastRequest:
    """The child forecast against its parent: the parent is the anchor, so the bin is of g_speedup.

    parent / parent_speedup carry the context a surrogate may use (the parent's speed against the
    original reference); reference_ms is the parent's time when both are known.
    """
    parent = _candidate(row["parent_code"], row.get("parent_launch"), row.get("parent_compile_options"),
                        name=str(row.get("parent_node_id") or "parent"))
    child = _candidate(row["child_code"], row.get("child_launch"), row.get("child_compile_options"),
                       name=str(row.get("child_node_id") or "child"))
    reference_ms = row.get("reference_ms")
    parent_speedup = row.get("parent_speedup")
    parent_ms = reference_ms / parent_speedup if reference_ms and parent_speedup else None
    return ForecastRequest(
        reference=parent, candidate=child, hardware=_hardware(row), problem=_problem_context(row, row["problem_id"]),
        parent=parent, parent_speedup=parent_speedup,
        compiler_facts=row.get("child_compiler_facts") or None,
        reference_compiler_facts=row.get("parent_compiler_facts") or None, reference_ms=parent_ms,
    )


def training_rows(rows: Iterable[dict]) -> list[dict]:
    """Rows in the form LearnedSurrogate.fit takes: {"request": ForecastRequest, "speedup": s}."""
    return [{"request": row_request(r), "speedup": row_speedup(r)} for r in rows]


# ---- validation --------------------------------------------------------------------------------

def validate_row(raw: Any, number: int, *, kind: str | None = None, bins: BinTable = DEFAULT_BINS,
                 default_source: str = "", from_csv: bool = False) -> tuple[dict | None, list[RowError], set[str]]:
    """Check one row; returns (clean row or None, errors, ignored field names)."""
    if not isinstance(raw, dict):
        return None, [RowError(number, "", "is not a JSON object")], set()
    kind = kind or row_kind(raw)
    aliases = ALIASES[kind]
    known = set(COMPARISON_FIELDS if kind == COMPARISON else PAIR_FIELDS) | set(OPTIONAL_FIELDS[kind])
    row: dict = {}
    errors: list[RowError] = []
    ignored: set[str] = set()
    for key, value in raw.items():
        name = aliases.get(key, key)
        if name not in known:
            ignored.add(key)
            continue
        if from_csv and value == "":
            continue
        if value is None:
            continue
        if name in row:
            errors.append(RowError(number, name, f"is given twice (as '{name}' and an alias)"))
            continue
        row[name] = value

    def err(field: str, message: str) -> None:
        errors.append(RowError(number, field, message))

    for name in _REQUIRED[kind]:
        if name not in row:
            err(name, "is missing")
    for name in ("anchor_code", "candidate_code", "parent_code", "child_code"):
        if name in row and (not isinstance(row[name], str) or not row[name].strip()):
            err(name, "must be non-empty source code")
    for name in (_ID[kind], _PROBLEM[kind], "hardware", "source", "source_id", "parent_node_id", "child_node_id"):
        if name in row:
            value = row[name]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[name] = value = str(value)
            if not isinstance(value, str) or (name in _REQUIRED[kind] and not value.strip()):
                err(name, "must be non-empty text")
    speedup_field = _SPEEDUP[kind]
    speedup = None
    if speedup_field in row:
        speedup = _number(row[speedup_field])
        if speedup is None or not math.isfinite(speedup) or speedup <= 0:
            err(speedup_field, f"must be a positive finite number, got {_shown(row[speedup_field])}")
            speedup = None
        else:
            row[speedup_field] = speedup
    if "true_bin" in row:
        value = _number(row["true_bin"])
        if value is None or not math.isfinite(value) or value != int(value) or not 1 <= int(value) <= bins.n_bins:
            err("true_bin", f"must be an integer within 1..{bins.n_bins}, got {_shown(row['true_bin'])}")
        else:
            row["true_bin"] = int(value)
            if speedup is not None and bins.bin_of(speedup) != row["true_bin"]:
                err("true_bin", f"is {row['true_bin']} but the speedup {speedup:g} falls in bin "
                                f"{bins.bin_of(speedup)} ({bins.range_text(bins.bin_of(speedup))})")
    elif speedup is not None:
        row["true_bin"] = bins.bin_of(speedup)
    for name, expected in OPTIONAL_FIELDS[kind].items():
        if name not in row:
            continue
        value = row[name]
        if from_csv and expected in (_LIST, _DICT) and isinstance(value, str):
            try:
                value = row[name] = json.loads(value)
            except json.JSONDecodeError as exc:
                err(name, f"must be {expected} (JSON text in a CSV cell): {exc.msg} at character {exc.pos}")
                continue
            except RecursionError:
                err(name, f"must be {expected} (JSON text in a CSV cell): cannot be read, it is nested too deeply")
                continue
            except ValueError as exc:  # an integer of more than 4,300 digits
                err(name, f"must be {expected} (JSON text in a CSV cell): {str(exc).split(':')[0]}")
                continue
        if expected == _LIST and not isinstance(value, list):
            err(name, f"must be {expected}")
        elif expected == _DICT and not isinstance(value, dict):
            err(name, f"must be {expected}")
        elif expected == _NUMBER:
            number_value = _number(value)
            if number_value is None or not math.isfinite(number_value) or number_value <= 0:
                err(name, f"must be a positive number, got {_shown(value)}")
            else:
                row[name] = number_value
        elif expected == _TEXT and not isinstance(value, str):
            err(name, "must be text")
    if kind == PAIR and not errors and "parent_speedup" in row and "child_speedup" in row:
        implied = row["child_speedup"] / row["parent_speedup"]
        if abs(implied - row["g_speedup"]) > 1e-6 * max(1.0, implied):
            err("g_speedup", f"is {row['g_speedup']:g} but child_speedup / parent_speedup is {implied:g}")
    if "source" not in row and default_source:
        row["source"] = default_source
    if "source" not in row:
        err("source", "is missing (say where the row came from, or give a default source on import)")
    return (None if errors else row), errors, ignored


def _shown(value) -> str:
    """repr, cut short: a value in a message is never the whole of a huge or deeply nested cell."""
    return _SHORT.repr(value)


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond the float range
            return math.inf
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


# ---- files -------------------------------------------------------------------------------------

class _LimitReached(Exception):
    """Reading stopped at one of the limits; the message says which."""


def _size_text(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n % mib == 0 else f"{n:,} bytes"


def _too_large(max_bytes: int) -> str:
    return f"more than {_size_text(max_bytes)} once decompressed, the most a dataset file may hold here"


class _Counted(io.RawIOBase):
    """A binary stream's (decompressed) bytes, counted; past `limit` reading raises _LimitReached."""

    def __init__(self, stream, limit: int | None):
        self._stream, self._limit, self.count = stream, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._stream.read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self.count += size
        if self._limit is not None and self.count > self._limit:
            raise _LimitReached(_too_large(self._limit))
        return size

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            super().close()


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _open_text(path: Path, max_bytes: int | None = None):
    """The file as text, decompressed as it is read, never more than max_bytes of it (None: no limit)."""
    raw = _Counted(_open_binary(path), max_bytes)
    # utf-8-sig: a file saved by Excel (or Notepad) starts with a byte order mark, which is no part of the header
    return io.TextIOWrapper(io.BufferedReader(raw, 1 << 16), encoding="utf-8-sig", newline="")


def dataset_suffix(path: str | os.PathLike) -> str | None:
    """The accepted suffix the file's name ends in (lower-cased, DATASET_SUFFIXES), or None."""
    name = Path(path).name.lower()
    return next((s for s in sorted(DATASET_SUFFIXES, key=len, reverse=True) if name.endswith(s)), None)


def file_format(path: str | os.PathLike) -> str:
    suffix = dataset_suffix(path)
    if suffix is None:
        raise DatasetError(str(path), [], f"{path}: unknown file type; use a {DATASET_SUFFIXES_TEXT}.")
    return "csv" if suffix.startswith(".csv") else "jsonl"


def _check_not_gzip(path: Path) -> None:
    """A gzip file under a name without .gz would be read as text (\"can't decode byte 0x8b\"): say what it is."""
    if path.name.lower().endswith(".gz"):
        return
    try:
        with open(path, "rb") as handle:
            magic = handle.read(2)
    except OSError:
        return
    if magic == b"\x1f\x8b":
        raise DatasetError(str(path), [], f"{path}: the file is gzip-compressed; name it "
                                          f"{dataset_suffix(path) or '.jsonl'}.gz to import it.")


def _not_utf8_line(path: Path, max_bytes: int | None) -> str:
    """Where the first byte that is not UTF-8 is, "line N (byte 0xXX)": the reader's own error gives a position
    within a block of the file, not a line."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    try:
        with _Counted(_open_binary(path), max_bytes) as stream:
            while block := stream.read(1 << 16):
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:  # exc.object: the block after the few bytes held back (no newline)
                    line += exc.object.count(b"\n", 0, exc.start)
                    return f"line {line} holds a byte that is not UTF-8 (0x{exc.object[exc.start]:02x})"
                line += block.count(b"\n")
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return f"line {line} ends the file within a UTF-8 character"
    except (OSError, EOFError, zlib.error, _LimitReached):
        pass
    return "it holds a byte that is not UTF-8"


def check_decompressed_size(path: str | os.PathLike, max_bytes: int = UPLOAD_MAX_BYTES) -> int:
    """The file's size once decompressed, read in blocks and never past max_bytes (a gzip of a few KB may
    hold gigabytes): DatasetError, saying so, when it holds more."""
    path = Path(path)
    total = 0
    try:
        with _open_binary(path) as stream:
            while block := stream.read(1 << 20):
                total += len(block)
                if total > max_bytes:
                    raise DatasetError(str(path), [], f"{path}: {_too_large(max_bytes)}; nothing was imported.")
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(str(path), [], f"{path}: cannot be read ({exc}).") from None
    return total


def _too_long(row: int, limit: int) -> str:
    """The sentence for a row (counting the blank lines before it) past the limit."""
    where = "the header row" if row == 0 else f"row {row}"
    return (f"{where} is longer than {_size_text(limit).replace('bytes', 'characters')} of text (with any blank "
            "lines before it), the most one row may hold")


class _Lines:
    """The text's lines for the csv reader; the lines of one record (`held`, reset by the reader's caller) may
    not pass `limit` characters, and a line is never read whole past it."""

    def __init__(self, handle, limit: int):
        self._handle, self._limit, self.held, self.row = handle, limit, 0, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self._handle.readline(self._limit + 1)
        if not line:
            raise StopIteration
        self.held += len(line)
        if self.held > self._limit:
            raise _LimitReached(_too_long(self.row, self._limit))
        return line


def _raw_rows(handle, fmt: str, path: Path, max_row_chars: int) -> Iterator[tuple[int, Any, RowError | None]]:
    """(row number, the row as read, or None and why it cannot be read), one row at a time; a row longer than
    max_row_chars stops reading (_LimitReached) before it is parsed."""
    if fmt == "csv":
        # a cell may hold a whole kernel source; the limit is process-wide, so it is only ever raised
        if csv.field_size_limit() < CSV_FIELD_LIMIT:
            csv.field_size_limit(CSV_FIELD_LIMIT)
        lines = _Lines(handle, max_row_chars)
        reader = csv.DictReader(lines)
        try:
            if not reader.fieldnames:
                raise DatasetError(str(path), [], f"{path}: the CSV file has no header row.")
            if len(reader.fieldnames) > MAX_COLUMNS:
                # every record is read into a dict of the header's width, however short its line
                raise DatasetError(str(path), [], f"{path}: the header has {len(reader.fieldnames):,} columns, more "
                                                  f"than the {MAX_COLUMNS:,} a dataset may have; nothing was imported.")
            number = 0
            while True:
                lines.held, lines.row = 0, number + 1
                record = next(reader, None)
                if record is None:
                    return
                number += 1
                if None in record:
                    yield number, None, RowError(number, "", f"has {len(record[None])} more cell(s) than the header")
                else:
                    yield number, record, None
        except csv.Error as exc:
            line = reader.reader.line_num
            raise DatasetError(str(path), [], f"{path}: cannot be read (line {line}: {exc}).") from None
    number, held = 0, 0
    while line := handle.readline(max_row_chars + 1):
        held += len(line)  # the line, and the blank lines before it
        if held > max_row_chars + 1 or (len(line) > max_row_chars and not line.endswith("\n")):
            raise _LimitReached(_too_long(number + 1, max_row_chars))
        if not line.strip():
            continue
        number, held = number + 1, 0
        raw, bad = None, None
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            bad = RowError(number, "", f"is not valid JSON ({exc.msg} at character {exc.pos})")
        except RecursionError:
            bad = RowError(number, "", "cannot be read: it is nested too deeply")
        except ValueError as exc:  # an integer of more than 4,300 digits
            bad = RowError(number, "", f"is not valid JSON ({str(exc).split(':')[0]})")
        yield number, raw, bad


def read_dataset(path: str | os.PathLike, *, bins: BinTable = DEFAULT_BINS, default_source: str = "",
                 kind: str | None = None, max_bytes: int | None = None, max_rows: int | None = MAX_ROWS,
                 max_errors: int = MAX_ERRORS, max_row_chars: int = MAX_ROW_CHARS) -> Dataset:
    """Read and check every row; raise DatasetError (with the first max_errors problems and their count) or
    return the whole set.

    Rows are checked as they are read and only good ones are kept. Reading stops, and the file is refused
    with a sentence that names the limit, past max_rows rows, at a row longer than max_row_chars, or past
    max_bytes decompressed bytes (None: no limit; a file from the browser is held to UPLOAD_MAX_BYTES by
    check_decompressed_size first)."""
    path = Path(path)
    fmt = file_format(path)
    if not path.exists():
        raise DatasetError(str(path), [], f"{path}: no such file.")
    _check_not_gzip(path)
    errors: list[RowError] = []
    total_errors = 0

    def problems(found: list[RowError]) -> None:
        nonlocal total_errors
        total_errors += len(found)
        room = max_errors - len(errors)
        if room > 0:
            errors.extend(found[:room])

    rows: list[dict] = []
    ignored: set[str] = set()
    seen: dict[str, int] = {}
    stopped = ""
    try:
        with _open_text(path, max_bytes) as handle:
            for number, raw, bad in _raw_rows(handle, fmt, path, max_row_chars):
                if max_rows is not None and number > max_rows:
                    stopped = f"more than {max_rows:,} rows, the most one dataset may hold"
                    break
                if bad is not None:
                    problems([bad])
                    continue
                row, row_errors, row_ignored = validate_row(raw, number, kind=kind, bins=bins,
                                                           default_source=default_source, from_csv=fmt == "csv")
                for name in row_ignored:
                    if len(ignored) >= _MAX_IGNORED:
                        break
                    ignored.add(name)
                if row_errors:
                    problems(row_errors)
                if row is None:
                    continue
                this_kind = row_kind(row)
                if kind is None:
                    kind = this_kind
                elif this_kind != kind:
                    problems([RowError(number, "", f"is a {this_kind} row in a file of {kind} rows")])
                    continue
                key = row_id(row)
                if key in seen:
                    problems([RowError(number, _ID[kind], f"{_shown(key)} was already used by row {seen[key]}")])
                    continue
                seen[key] = number
                rows.append(row)
    except _LimitReached as exc:
        stopped = str(exc)
    except UnicodeDecodeError:
        raise DatasetError(str(path), [], f"{path}: cannot be read: {_not_utf8_line(path, max_bytes)}; "
                                          "save it as UTF-8.") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(str(path), [], f"{path}: cannot be read ({exc}).") from None
    if stopped:
        rows.clear()
        listed = f", the first {len(errors)} listed" if total_errors > len(errors) else ""
        found = f" ({total_errors:,} problem{'s' if total_errors != 1 else ''} in the rows read{listed})" \
            if total_errors else ""
        raise DatasetError(str(path), errors, f"{path}: {stopped}; reading stopped there and nothing was "
                                              f"imported{found}.", total=total_errors)
    if errors:
        raise DatasetError(str(path), errors, total=total_errors)
    if not rows:
        raise DatasetError(str(path), [], f"{path}: holds no rows.")
    return Dataset(kind=kind or COMPARISON, rows=rows, ignored_fields=tuple(sorted(ignored)))


def write_dataset(path: str | os.PathLike, rows: Iterable[dict], *, exclusive: bool = False) -> int:
    """Write rows as JSON Lines (gzip when the name ends in .gz), replacing the file atomically.

    exclusive: never replace; the whole file is linked into place in one step that fails with FileExistsError
    (and leaves nothing behind) when the name exists, even if another writer took it while this one wrote."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    count = 0
    try:
        with os.fdopen(fd, "wb") as raw:
            stream = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.name.lower().endswith(".gz") else raw
            with io.TextIOWrapper(stream, encoding="utf-8") as text:
                for row in rows:
                    text.write(json.dumps(row, sort_keys=False) + "\n")
                    count += 1
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return count


# ---- building rows from recorded measurements ---------------------------------------------------

def rows_from_records(records: Iterable[dict], *, problem: str, reference: dict, render, source: str,
                      problem_context: dict | None = None, bins: BinTable = DEFAULT_BINS) -> tuple[list[dict], list[str]]:
    """Comparison rows from one problem's recorded measurements (docs/contracts.md, Recorded datasets).

    render(knobs) -> Candidate dict for a family variant (the caller owns the problem spec); a record
    without knobs is the reference itself. Records that failed, vendor baselines (no CUDA source) and
    records whose rendered source no longer hashes to the recorded hash are skipped, each with a reason.
    Returns (rows, skipped reasons).
    """
    import hashlib

    rows, skipped = [], []
    records = list(records)
    reference_facts = next((r.get("compiler") for r in records
                            if r.get("knobs") is None and r.get("variant") == "reference" and r.get("compiler")), None)
    for record in records:
        label = record.get("variant") or record.get("candidate_name") or record.get("source_hash", "?")[:12]
        if record.get("status") != "ok":
            skipped.append(f"{label}: status {record.get('status')}")
            continue
        speedup = record.get("speedup")
        if not isinstance(speedup, (int, float)) or not math.isfinite(speedup) or speedup <= 0:
            skipped.append(f"{label}: no valid speedup")
            continue
        knobs = record.get("knobs")
        if knobs is None:
            if str(label).startswith("vendor:") or record.get("candidate_name", "").startswith("vendor:"):
                skipped.append(f"{label}: a vendor library baseline has no CUDA source")
                continue
            candidate = dict(reference)
        else:
            candidate = render(knobs)
        digest = hashlib.sha256(candidate["source"].encode()).hexdigest()
        if record.get("source_hash") and digest != record["source_hash"]:
            skipped.append(f"{label}: the rendered source does not match the recorded hash (spec changed?)")
            continue
        hardware = record.get("hardware") or {}
        rows.append(comparison_row(
            comparison_id=f"{problem}:{hardware.get('name', 'gpu')}:{record.get('source_hash', label)[:16]}:"
                          f"{record.get('seed', 0)}",
            pack=problem, anchor=reference, candidate=candidate, hardware=hardware, speedup=float(speedup),
            source=source, source_id=str(label), bins=bins, compiler_facts=record.get("compiler") or {},
            anchor_compiler_facts=reference_facts or {},
            reference_ms=(record.get("reference") or {}).get("median_ms"), problem=problem_context,
        ))
    return rows, skipped


def neighbour_pairs(rows: list[dict], *, knob_values: dict[str, list] | None = None, source: str | None = None,
                    bins: BinTable = DEFAULT_BINS) -> list[dict]:
    """Parent -> child pairs among recorded variants of one problem that differ in exactly one knob.

    These are the moves the template generator makes (one knob to a neighbouring or another value);
    with knob_values a numeric knob only steps to an adjacent allowed value, as the generator does.
    Each unordered neighbour pair gives both directions: each variant is a parent of the other.
    """
    by_problem: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("knobs"):
            by_problem.setdefault(row["pack"], []).append(row)
    out = []
    for problem, variants in by_problem.items():
        for a in variants:
            for b in variants:
                if a is b or a["hardware"] != b["hardware"] or set(a["knobs"]) != set(b["knobs"]):
                    continue
                changed = [k for k in a["knobs"] if a["knobs"][k] != b["knobs"][k]]
                if len(changed) != 1 or not _adjacent(changed[0], a["knobs"], b["knobs"], knob_values):
                    continue
                parent = _candidate(a["candidate_code"], a.get("candidate_launch"), a.get("candidate_compile_options"))
                child = _candidate(b["candidate_code"], b.get("candidate_launch"), b.get("candidate_compile_options"))
                anchor = _candidate(a["anchor_code"], a.get("anchor_launch"), a.get("anchor_compile_options"))
                out.append(pair_row(
                    pair_id=f"{a['comparison_id']}->{b['comparison_id']}", problem_id=problem, parent=parent,
                    child=child, hardware=a.get("hardware_spec") or a["hardware"],
                    parent_speedup=a["aggregated_speedup"], child_speedup=b["aggregated_speedup"],
                    source=source or a["source"], source_id=f"{a['source_id']} -> {b['source_id']}",
                    parent_node_id=a["source_id"], child_node_id=b["source_id"], anchor=anchor, bins=bins,
                    parent_compiler_facts=a.get("compiler_facts"), child_compiler_facts=b.get("compiler_facts"),
                    reference_ms=a.get("reference_ms"),
                    problem={"sizes": a.get("problem_sizes"), "roofline": a.get("problem_roofline"),
                             "description": a.get("problem_description")},
                ))
    return out


def _adjacent(knob: str, a: dict, b: dict, knob_values: dict[str, list] | None) -> bool:
    values = (knob_values or {}).get(knob)
    if not values:
        return True
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not numeric or a[knob] not in values or b[knob] not in values:
        return True
    ordered = sorted(values)
    return abs(ordered.index(a[knob]) - ordered.index(b[knob])) == 1


# ---- splits ------------------------------------------------------------------------------------

def split_rows(rows: list[dict], fraction: float, *, seed: int = 0, by_problem: bool = False
               ) -> tuple[list[dict], list[dict]]:
    """(rest, calibration): a seeded random fraction of rows (or of problems) held out for calibration."""
    if not 0 < fraction < 1:
        raise ValueError("The calibration fraction must be within (0, 1).")
    rng = random.Random(seed)
    if by_problem:
        problems = sorted({row_problem(r) for r in rows})
        if len(problems) < 2:
            raise ValueError("A split by problem needs at least two problems.")
        rng.shuffle(problems)
        count = min(len(problems) - 1, max(1, round(fraction * len(problems))))
        held = set(problems[:count])
        return [r for r in rows if row_problem(r) not in held], [r for r in rows if row_problem(r) in held]
    order = list(range(len(rows)))
    rng.shuffle(order)
    count = min(len(rows) - 1, max(1, round(fraction * len(rows))))
    held = set(order[:count])
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]
