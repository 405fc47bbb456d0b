"""Evaluation reports as JSON files in one folder: saved, listed, loaded by id.

A report id is "<UTC time>-<surrogate>-<dataset>" made of [a-z0-9-] only, so an id from a URL can
never name a file outside the folder.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,150}$")

logger = logging.getLogger(__name__)

# What the lab's pages read of a report's evaluation block beside its figures: the charts' data.
CHART_KEYS = ("reliability", "risk_coverage", "confusion")


class ReportNotFound(LookupError):
    pass


class ReportUnreadable(ReportNotFound):
    """A file in the reports folder, under a report's name, that holds no report the lab can read (a stray file,
    or one from an older KernelLab moved there by hand). Its message is a sentence naming the file and what is
    missing."""


def _kind_of(value) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true or false",
            type(None): "null"}.get(type(value), type(value).__name__)


def report_problem(report, *, charts: bool = False) -> str | None:
    """What keeps the lab from reading `report` (a phrase), or None. A report is a JSON object with an
    "evaluation" object; `charts`: its evaluation (and every recalibration column's) must hold the charts' data."""
    if not isinstance(report, dict):
        return f"it holds {_kind_of(report)}, not a report object"
    blocks = [("evaluation", report.get("evaluation"))]
    recal = report.get("recalibration")
    if recal is not None:
        methods = recal.get("methods") if isinstance(recal, dict) else None
        if not isinstance(methods, dict):
            return 'its "recalibration" has no "methods" object'
        blocks += [(f'recalibration "{m}"', b.get("evaluation") if isinstance(b, dict) else None)
                   for m, b in methods.items()]
    for where, block in blocks:
        if not isinstance(block, dict):
            return 'it has no "evaluation" object' if where == "evaluation" else \
                f'its {where} has no "evaluation" object'
        if charts:
            missing = [k for k in CHART_KEYS if k not in block]
            if missing:
                named = ", ".join(f'"{k}"' for k in missing)
                return f"its {where if where == 'evaluation' else where + ' evaluation'} has no {named}"
    for key in ("surrogate", "dataset"):
        if report.get(key) is not None and not isinstance(report[key], dict):
            return f'its "{key}" is not an object'
    return None


def unreadable_message(name: str, problem: str) -> str:
    return f"{name} is not a report KernelLab can read: {problem}."


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
        report = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportNotFound(report_id) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise ReportUnreadable(unreadable_message(path.name, "it is not JSON")) from None
    problem = report_problem(report)
    if problem:
        raise ReportUnreadable(unreadable_message(path.name, problem))
    return report


def list_reports(folder: str | os.PathLike) -> list[dict]:
    """Summaries of every readable report, newest first; a file that holds no report is left out, with a line
    in the log naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob("*.json"):
        if not _ID.match(path.stem):
            continue
        try:
            report = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            logger.warning("%s", unreadable_message(str(path), "it is not JSON") + " It is left out of the list.")
            continue
        problem = report_problem(report)
        if problem:
            logger.warning("%s", unreadable_message(str(path), problem) + " It is left out of the list.")
            continue
        evaluation = report["evaluation"]
        metrics = evaluation.get("metrics") if isinstance(evaluation.get("metrics"), dict) else {}
        out.append({
            "id": path.stem, "created_at": str(report.get("created_at") or ""),
            "surrogate": (report.get("surrogate") or {}).get("id", ""),
            "dataset": (report.get("dataset") or {}).get("name", ""),
            "rows": evaluation.get("rows"), "answered": evaluation.get("answered"),
            "exact_accuracy": metrics.get("exact_accuracy"), "within_one_accuracy": metrics.get("within_one_accuracy"),
            "brier": metrics.get("brier"), "crps": metrics.get("crps"), "ece": metrics.get("ece"),
            "aurc": metrics.get("aurc"), "title": str(report.get("title") or ""),
        })
    return sorted(out, key=lambda r: (r["created_at"], r["id"]), reverse=True)
