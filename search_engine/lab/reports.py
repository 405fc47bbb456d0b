"""Evaluation reports as JSON files in one folder: saved, listed, loaded by id.

A report id is "<UTC time>-<surrogate>-<dataset>" made of [a-z0-9-] only, so an id from a URL can
never name a file outside the folder.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,150}$")


class ReportNotFound(LookupError):
    pass


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:40] or "x"


def new_report_id(surrogate: str, dataset: str, when: datetime | None = None) -> str:
    """When, what and on what, and six random hex digits: two workspaces' reports saved in the same second (each
    folder only knows its own ids) must not share an id, since the lab's pages find a report by id alone."""
    import secrets

    when = when or datetime.now(timezone.utc)
    return f"{when:%Y%m%d-%H%M%S}-{_slug(surrogate)}-{_slug(dataset)}-{secrets.token_hex(3)}"


def save_report(folder: str | os.PathLike, report: dict) -> str:
    """Write the report (its "id" is set if missing; an existing id gets a numeric suffix)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    report_id = report.get("id") or new_report_id(report.get("surrogate", {}).get("id", "surrogate"),
                                                  report.get("dataset", {}).get("name", "dataset"))
    base, n = report_id, 1
    while (folder / f"{report_id}.json").exists():
        n += 1
        report_id = f"{base}-{n}"
    if not _ID.match(report_id):
        raise ValueError(f"Not a usable report id: {report_id!r}.")
    report["id"] = report_id
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".report-")
    with os.fdopen(fd, "w") as handle:
        json.dump(report, handle, indent=1, allow_nan=False, default=_plain)
    os.replace(tmp, folder / f"{report_id}.json")
    return report_id


def _plain(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def load_report(folder: str | os.PathLike, report_id: str) -> dict:
    if not _ID.match(report_id or ""):
        raise ReportNotFound(report_id)
    path = Path(folder) / f"{report_id}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportNotFound(report_id) from None
    except json.JSONDecodeError:
        raise ReportNotFound(report_id) from None


def list_reports(folder: str | os.PathLike) -> list[dict]:
    """Summaries of every readable report, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob("*.json"):
        if not _ID.match(path.stem):
            continue
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        evaluation = report.get("evaluation") or {}
        metrics = evaluation.get("metrics") or {}
        out.append({
            "id": path.stem, "created_at": report.get("created_at", ""),
            "surrogate": (report.get("surrogate") or {}).get("id", ""),
            "dataset": (report.get("dataset") or {}).get("name", ""),
            "rows": evaluation.get("rows"), "answered": evaluation.get("answered"),
            "exact_accuracy": metrics.get("exact_accuracy"), "within_one_accuracy": metrics.get("within_one_accuracy"),
            "brier": metrics.get("brier"), "crps": metrics.get("crps"), "ece": metrics.get("ece"),
            "aurc": metrics.get("aurc"), "title": report.get("title", ""),
        })
    return sorted(out, key=lambda r: (r["created_at"], r["id"]), reverse=True)
