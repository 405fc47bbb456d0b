"""Replay backend: answers from recorded measurements (`<problem>/records/<gpu>.jsonl.gz`).

Records are keyed by (problem name, source hash); results say backend="replay". A source that was
never recorded comes back "unavailable": that says nothing about the candidate.
"""
from __future__ import annotations

import gzip
import json
import logging
import zlib
from pathlib import Path

from ..candidate import Candidate
from ..compiler import DEFAULT_ARCH, compile_cubin
from ..result import CompileReport, MeasurementResult
from ..settings import MeasureSettings
from ..spec import Problem
from .base import Backend

logger = logging.getLogger(__name__)


def records_dir(problem: Problem, root: str | Path | None = None) -> Path | None:
    if root is not None:
        path = Path(root)
        return path / problem.name / "records" if (path / problem.name / "records").is_dir() else path
    if problem.folder is not None:
        return problem.folder / "records"
    return None


def record_files(problem: Problem, root: str | Path | None = None, gpu: str | None = None) -> list[Path]:
    folder = records_dir(problem, root)
    if folder is None or not folder.is_dir():
        return []
    files = sorted(folder.glob("*.jsonl.gz"))
    if gpu is not None:
        files = [f for f in files if f.name == f"{gpu}.jsonl.gz"]
    return files


class RecordsUnreadable(ValueError):
    """A records file that is no gzip-compressed JSON lines, or is cut off before its first record; `why` is the
    clause after the file's name ("it is cut off before its first record")."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path} cannot be read: {why}")
        self.path = path
        self.why = why


def read_records(path: Path, *, strict: bool = False):
    """Every complete record; a recording killed mid-write leaves a cut gzip member at the end, whose complete
    lines are read and the rest skipped. A file that is not gzip-compressed text, is damaged, or is cut off before
    its first record raises RecordsUnreadable, naming the file and what is wrong, when `strict` (where a caller can
    show it: a command's refusal); otherwise the same sentence is logged as a warning and the file reads as holding
    what came before the damage (nothing, for a file that is no gzip at all), so a web page or a worker goes on."""
    read = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue   # a line cut short by an interrupted recording
                    if isinstance(record, dict):
                        read += 1
                        yield record
        return
    except EOFError:
        if read:
            return         # the cut member an interrupted recording leaves at the end
        problem = "it is cut off before its first record"
    except (gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        problem = f"it is not gzip-compressed JSON lines ({exc})"
    if strict:
        raise RecordsUnreadable(path, problem)
    logger.warning("%s cannot be read: %s; read as holding %s.", path, problem,
                   f"its first {read} records" if read else "no records")


def record_belongs(record: dict, problem_name: str) -> bool:
    """Whether the replay backend answers `problem_name` from `record`: a record of that problem (one that names
    none is the file's problem's) with the source hash it is looked up by."""
    return record.get("problem", problem_name) == problem_name and "source_hash" in record


def records_unusable(path: Path, problem_name: str) -> str | None:
    """Why the replay backend could answer nothing for `problem_name` from the records file `path` (a clause: "it
    is not gzip-compressed JSON lines (...)", "it holds no records", "its records are of another problem (x)"), or
    None once it has read one record it would answer from."""
    others: set[str] = set()
    records = 0
    try:
        for record in read_records(path, strict=True):
            if record_belongs(record, problem_name):
                return None
            records += 1
            if record.get("problem", problem_name) != problem_name:
                others.add(str(record["problem"]))
    except RecordsUnreadable as exc:
        return exc.why
    except OSError as exc:
        return f"it cannot be opened ({exc.strerror or exc})"
    if others:
        named = ", ".join(sorted(others)[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        return f"its records are of another problem ({named})"
    return "none of its records has a source hash" if records else "it holds no records"


class ReplayBackend(Backend):
    name = "replay"

    def __init__(self, records_root: str | Path | None = None, gpu: str | None = None):
        self.records_root = records_root
        self.gpu = gpu
        self._index: dict[tuple[str, str], dict[str, dict]] = {}

    def _records(self, problem: Problem) -> dict[str, dict]:
        key = (problem.name, problem.spec_hash)
        if key not in self._index:
            table: dict[str, dict] = {}
            for path in record_files(problem, self.records_root, self.gpu):
                for record in read_records(path):
                    if record_belongs(record, problem.name):
                        table.setdefault(record["source_hash"], record)
            self._index[key] = table
        return self._index[key]

    def has_records(self, problem: Problem) -> bool:
        return bool(self._records(problem))

    def check(self, problem: Problem, candidate: Candidate) -> CompileReport:
        if problem.reference.kind == "pytorch":
            from .torch import kernelbench_check
            return kernelbench_check(problem, candidate)
        return compile_cubin(candidate.source, candidate.compile_options, DEFAULT_ARCH).report

    def measure(self, problem: Problem, candidate: Candidate, *, seed: int, profile: bool, energy: bool,
                timeout_s: float, settings: MeasureSettings) -> MeasurementResult:
        record = self._records(problem).get(candidate.source_hash)
        if record is None:
            return MeasurementResult(status="unavailable", backend=self.name, seed=seed, problem=problem.name,
                                     candidate_name=candidate.name, source_hash=candidate.source_hash,
                                     reason="The replay dataset has no measurement of this source "
                                            f"(problem '{problem.name}', hash {candidate.source_hash[:12]}).")
        result = MeasurementResult.from_dict(record)
        result.backend = self.name
        result.candidate_name = candidate.name
        result.problem = problem.name
        return result
