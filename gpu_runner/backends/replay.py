"""Replay backend: answers from recorded measurements (`<problem>/records/<gpu>.jsonl.gz`).

Records are keyed by (problem name, source hash); results say backend="replay". A source that was
never recorded comes back "unavailable": that says nothing about the candidate.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from ..candidate import Candidate
from ..compiler import DEFAULT_ARCH, compile_cubin
from ..result import CompileReport, MeasurementResult
from ..settings import MeasureSettings
from ..spec import Problem
from .base import Backend


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


def read_records(path: Path):
    """Every complete record; a recording killed mid-write leaves a cut gzip member at the end."""
    try:
        with gzip.open(path, "rt") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError:
                        continue   # a line cut short by an interrupted recording
    except (EOFError, gzip.BadGzipFile, zlib.error):
        return


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
                    if record.get("problem", problem.name) == problem.name and "source_hash" in record:
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
