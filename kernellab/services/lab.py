"""The surrogate lab's files: datasets and evaluation reports, each kept in its workspace's folder.

A workspace's datasets live in DATA_DIR/datasets/<workspace slug>/<name>.jsonl and its reports in
DATA_DIR/reports/<workspace slug>/<id>.json, so that a name or a report id only ever reaches the
files of a workspace whose membership was checked first.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kernellab.models import Workspace
from kernellab.selectors.lab import lab_datasets_dir, lab_reports_dir
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError
from search_engine.lab.datasets import (DATASET_SUFFIXES, DATASET_SUFFIXES_TEXT, Dataset, DatasetError,  # noqa: F401
                                        read_dataset, write_dataset)
from search_engine.lab.reports import save_report

DATASET_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
# DATASET_SUFFIXES (and DATASET_SUFFIXES_TEXT, the same list in words): the one list of the names a dataset file may
# have, for import_dataset and the /lab/ form alike (search_engine.lab.datasets).


class DatasetRejected(ServiceError):
    """The dataset was not stored; `errors` lists every bad row (empty for other reasons), `detail` is the
    summary with the first of them, for a terminal."""

    def __init__(self, message: str, errors: list[str] | None = None, detail: str = ""):
        super().__init__(message)
        self.errors = errors or []
        self.detail = detail or message


@dataclass
class ImportedDataset:
    name: str
    path: Path
    kind: str
    rows: int
    problems: Counter = field(default_factory=Counter)
    ignored_fields: list[str] = field(default_factory=list)


def lab_workspace_for_command(slug: str | None) -> Workspace:
    """The workspace a management command works in: --workspace, or the only one there is."""
    if slug:
        workspace = Workspace.objects.filter(slug=slug).first()
        if workspace is None:
            known = ", ".join(Workspace.objects.order_by("slug").values_list("slug", flat=True)) or "none yet"
            raise ServiceError(f"No workspace {slug!r}; workspaces: {known}.")
        return workspace
    workspaces = list(Workspace.objects.order_by("slug")[:2])
    if len(workspaces) == 1:
        return workspaces[0]
    if not workspaces:
        raise ServiceError("The lab keeps datasets and reports per workspace and there is none yet; "
                           "run manage.py kernellab_bootstrap first.")
    slugs = ", ".join(Workspace.objects.order_by("slug").values_list("slug", flat=True))
    raise ServiceError(f"Several workspaces exist; pass --workspace (one of {slugs}).")


def dataset_path(*, value: str, workspace_slug: str | None = None) -> Path:
    """A dataset file given by path, or the name of a dataset imported into a workspace's lab."""
    path = Path(value)
    if path.is_file():
        return path
    if DATASET_NAME.fullmatch(value):
        folder = lab_datasets_dir(lab_workspace_for_command(workspace_slug))
        candidate = folder / f"{value}.jsonl"
        if candidate.is_file():
            return candidate
        known = sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []
        hint = f" Datasets in this workspace: {', '.join(known)}." if known else ""
        raise ServiceError(f"No dataset {value!r}: give a .jsonl/.csv path or the name of an imported dataset.{hint}")
    raise ServiceError(f"No dataset {value!r}: give a .jsonl/.csv path or the name of an imported dataset.")


def dataset_load(*, value: str, workspace_slug: str | None = None, kind: str | None = None) -> tuple[Path, Dataset]:
    path = dataset_path(value=value, workspace_slug=workspace_slug)
    try:
        return path, read_dataset(path, kind=kind, default_source=f"imported:{path.name}")
    except DatasetError as exc:
        raise ServiceError(str(exc)) from None


def _name_taken(name: str, workspace: Workspace, replace_hint: str) -> DatasetRejected:
    return DatasetRejected(f"A dataset named {name!r} exists already in {workspace.name}; "
                           f"{replace_hint} or choose another name.")


def dataset_import(*, workspace: Workspace, user, file: Path, name: str, replace: bool = False,
                   source: str | None = None, shown_name: str | None = None,
                   replace_hint: str = "tick 'replace a dataset of the same name'") -> ImportedDataset:
    """Check every row of `file` and store it as the workspace's dataset `name`, all or nothing.

    `user` None is the operator on the command line; anyone else needs the engineer role in the workspace.
    Without `replace` the file is put in place in one step that fails if the name exists by then (two uploads of
    one name at once: one is stored, the other is refused and replaces nothing). `replace_hint` says how to ask
    for a replacement where the request came from ("pass --replace" on the command line)."""
    if user is not None:
        access_require(user=user, workspace=workspace, action="upload")
    shown_name = shown_name or Path(file).name
    if not DATASET_NAME.fullmatch(name):
        raise DatasetRejected(f"Dataset name {name!r}: use letters, digits, '-' and '_' only (at most 80).")
    target = lab_datasets_dir(workspace) / f"{name}.jsonl"
    if target.exists() and not replace:  # (early, before the rows are read; the write below decides)
        raise _name_taken(name, workspace, replace_hint)
    try:
        dataset = read_dataset(file, default_source=source or f"imported:{shown_name}")
    except DatasetError as exc:
        summary = str(exc).splitlines()[0].replace(str(file), shown_name)
        raise DatasetRejected(summary, [str(e) for e in exc.errors], str(exc).replace(str(file), shown_name)) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_dataset(target, dataset.rows, exclusive=not replace)
    except FileExistsError:  # another import took the name while this file was read
        raise _name_taken(name, workspace, replace_hint) from None
    return ImportedDataset(name=name, path=target, kind=dataset.kind, rows=len(dataset),
                           problems=Counter(r.get("pack") or r.get("problem_id") for r in dataset.rows),
                           ignored_fields=list(dataset.ignored_fields))


def report_save(*, workspace: Workspace, report: dict) -> tuple[str, Path]:
    """Store an evaluation report in the workspace's lab; returns its id and file."""
    folder = lab_reports_dir(workspace)
    report_id = save_report(folder, report)
    return report_id, folder / f"{report_id}.json"
