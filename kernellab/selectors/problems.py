"""Where problems live on disk."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings


def bundled_dir() -> Path:
    """Where the bundled problems (and their recorded measurements) live."""
    return Path(settings.KERNELLAB_PROBLEMS_DIR)


def imported_records_root(workspace) -> Path:
    """Where recorded measurements brought along with a problem folder live (``manage.py search
    FOLDER``): ``<root>/<problem name>/records/<gpu>.jsonl.gz``, one root per workspace."""
    return Path(settings.DATA_DIR) / "records" / workspace.slug


def problem_records_root(problem) -> Path:
    """The folder holding ``<problem name>/records/`` for this problem: the bundled problems' folder,
    or the workspace's imported records for an uploaded one."""
    return bundled_dir() if problem.bundled else imported_records_root(problem.workspace)


def problem_records_file(problem, gpu: str) -> Path:
    return problem_records_root(problem) / problem.name / "records" / f"{gpu}.jsonl.gz"
