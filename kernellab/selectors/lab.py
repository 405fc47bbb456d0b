"""Reads for the surrogate lab pages: only the datasets and reports of workspaces the user belongs to."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from kernellab.models import Workspace
from kernellab.selectors.access import user_can
from kernellab.selectors.workspaces import workspace_list_for_user
from search_engine.lab.reports import ReportNotFound, ReportUnreadable, list_reports, load_report


def lab_datasets_dir(workspace: Workspace) -> Path:
    return Path(settings.DATA_DIR) / "datasets" / workspace.slug


def lab_reports_dir(workspace: Workspace) -> Path:
    return Path(settings.DATA_DIR) / "reports" / workspace.slug


def lab_workspace_list(*, user, action: str = "view") -> list[Workspace]:
    return [w for w in workspace_list_for_user(user=user) if user_can(user=user, workspace=w, action=action)]


def lab_dataset_list(*, workspaces: list[Workspace]) -> list[dict]:
    out = []
    for workspace in workspaces:
        folder = lab_datasets_dir(workspace)
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.jsonl")):
            with open(path, "rb") as handle:
                rows = sum(1 for line in handle if line.strip())
            out.append({"name": path.stem, "rows": rows, "bytes": path.stat().st_size, "path": str(path),
                        "workspace": workspace})
    return out


def lab_report_list(*, workspaces: list[Workspace]) -> list[dict]:
    """Summaries of the workspaces' reports, newest first."""
    out = []
    for workspace in workspaces:
        out += [{**summary, "workspace": workspace} for summary in list_reports(lab_reports_dir(workspace))]
    return sorted(out, key=lambda r: (r["created_at"], r["id"]), reverse=True)


def lab_report_get(*, user, report_id: str) -> dict:
    """The report with this id from a workspace the user can view; ReportNotFound otherwise, ReportUnreadable
    (saying why) where the only file of that name holds no report the lab can read."""
    unreadable = None
    for workspace in lab_workspace_list(user=user):
        try:
            return {**load_report(lab_reports_dir(workspace), report_id), "workspace": workspace}
        except ReportUnreadable as exc:
            unreadable = unreadable or exc
        except ReportNotFound:
            continue
    raise unreadable or ReportNotFound(report_id)
