"""The surrogate lab pages: the datasets and evaluation reports of the user's workspaces, one report with
its charts, and two reports side by side."""
from __future__ import annotations

import re
import shlex
import tempfile
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kernellab.figures import lab_report_figures
from kernellab.selectors.lab import lab_dataset_list, lab_report_get, lab_report_list, lab_workspace_list
from kernellab.services.errors import ServiceError
from kernellab.services.lab import DATASET_SUFFIXES, DATASET_SUFFIXES_TEXT, DatasetRejected, dataset_import
from search_engine.bins import DEFAULT_BINS
from search_engine.lab.datasets import UPLOAD_MAX_BYTES, DatasetError, check_decompressed_size
from search_engine.lab.evaluation import METRIC_ROWS, metric_lines
from search_engine.lab.reports import ReportNotFound, ReportUnreadable, report_problem, unreadable_message

_UPLOAD_LIMIT = 64 * 1024 * 1024
_DATASET_EXTENSION = re.compile(r"\.(jsonl|ndjson|csv)(\.gz)?$", re.IGNORECASE)


def _shown_datasets(datasets: list[dict]) -> list[dict]:
    """The datasets as members see them: the file by its place in the lab (workspace/name.jsonl), never the
    server's path."""
    out = []
    for d in datasets:
        shown = {k: v for k, v in d.items() if k != "path"}
        shown["file"] = f"{Path(d['path']).parent.name}/{Path(d['path']).name}" if d.get("path") else ""
        out.append(shown)
    return out


def _index_context(user) -> dict:
    workspaces = lab_workspace_list(user=user)
    return {"datasets": _shown_datasets(lab_dataset_list(workspaces=workspaces)),
            "reports": lab_report_list(workspaces=workspaces)[:10],
            "import_workspaces": lab_workspace_list(user=user, action="upload")}


@login_required
def lab_index(request):
    return render(request, "kernellab/lab/index.html", _index_context(request.user))


@login_required
@require_POST
def dataset_upload(request):
    """Check every row from the browser: all rows good, or nothing stored and every problem listed."""
    import_workspaces = lab_workspace_list(user=request.user, action="upload")
    if not import_workspaces:
        messages.error(request, "Importing a dataset needs the engineer role in a workspace.")
        return redirect("lab")
    slug = request.POST.get("workspace") or (import_workspaces[0].slug if len(import_workspaces) == 1 else "")
    workspace = next((w for w in lab_workspace_list(user=request.user) if w.slug == slug), None)
    if workspace is None:
        messages.error(request, "Choose the workspace to import the dataset into.")
        return redirect("lab")
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, f"Choose a file to import: a {DATASET_SUFFIXES_TEXT}.")
        return redirect("lab")
    suffix = re.sub(r"^.*?((\.jsonl|\.ndjson|\.csv)(\.gz)?)$", r"\1", upload.name.lower())
    if suffix not in DATASET_SUFFIXES:
        messages.error(request, f"A dataset file is a {DATASET_SUFFIXES_TEXT}.")
        return redirect("lab")
    if upload.size > _UPLOAD_LIMIT:
        messages.error(request, f"The file is larger than {_UPLOAD_LIMIT // (1024 * 1024)} MiB; use manage.py import_dataset.")
        return redirect("lab")
    name = (request.POST.get("name") or "").strip() or _DATASET_EXTENSION.sub("", Path(upload.name).name)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"upload{suffix}"
        with open(path, "wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        try:
            # the cap above is on the bytes sent; a gzip of a few KB may hold gigabytes
            check_decompressed_size(path, UPLOAD_MAX_BYTES)
        except DatasetError as exc:
            messages.error(request, str(exc).replace(str(path), Path(upload.name).name))
            return redirect("lab")
        try:
            imported = dataset_import(workspace=workspace, user=request.user, file=path, name=name,
                                      replace=bool(request.POST.get("replace")), shown_name=Path(upload.name).name)
        except DatasetRejected as exc:
            if not exc.errors:
                messages.error(request, str(exc))
                return redirect("lab")
            context = _index_context(request.user)
            context.update({"upload_errors": exc.errors[:200], "upload_error_count": len(exc.errors),
                            "upload_summary": str(exc), "upload_name": upload.name})
            return render(request, "kernellab/lab/index.html", context, status=400)
        except ServiceError as exc:
            messages.error(request, str(exc))
            return redirect("lab")
    messages.success(request, f"Imported {imported.rows} {imported.kind} rows as '{imported.name}' in {workspace.name}.")
    return redirect("lab")


@login_required
def report_list(request):
    return render(request, "kernellab/lab/report_list.html",
                  {"reports": lab_report_list(workspaces=lab_workspace_list(user=request.user))})


class _Unreadable(Exception):
    """A report file the lab cannot read: shown as a 404 page with the sentence saying why."""


def _report(user, report_id: str, *, charts: bool = False) -> dict:
    """The report, or Http404; _Unreadable where its file holds no report the pages can show (with `charts`,
    one without the charts' data)."""
    try:
        report = lab_report_get(user=user, report_id=report_id)
    except ReportUnreadable as exc:
        raise _Unreadable(str(exc)) from None
    except ReportNotFound:
        raise Http404("No such report.") from None
    problem = report_problem(report, charts=charts)
    if problem:
        raise _Unreadable(unreadable_message(f"{report_id}.json", problem))
    return report


def _unreadable_page(request, message: str):
    return render(request, "kernellab/lab/report_unreadable.html", {"message": message}, status=404)


# An absolute (or home) path in a string: a "/" that begins no URL's part and follows no word ("a/b" is a name).
_SERVER_PATH = re.compile(r"(?<![\w.:/~-])~?/[^\s'\"<>,;()\[\]{}]*")


def _file_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def _hide_paths(text: str) -> str:
    """The text with each server path shown by its file name only."""
    return _SERVER_PATH.sub(lambda m: _file_name(m.group(0)), text)


# The options whose value is a file (or a dataset's name), shown by the file's name only.
_FILE_FLAGS = ("--model", "--train", "--dataset", "--pairs", "--recalibration", "--cache", "--out",
               "--kernelbench", "--cuda-l1")


def _shown_command(command: str) -> str:
    """The command line with each file argument by its file name (a quoted path may hold spaces)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return _hide_paths(command)
    shown = []
    for i, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if word.startswith("--") and eq:
            shown.append(f"{flag}={_file_name(value) if flag in _FILE_FLAGS else _hide_paths(value)}")
        elif i and words[i - 1] in _FILE_FLAGS or word.startswith(("/", "~/")):
            shown.append(_file_name(word))
        else:
            shown.append(_hide_paths(word))
    return shlex.join(shown)


def _command_files(command: str) -> list[str]:
    """The files the command line names (longest first): free text (the protocol) may quote them, spaces and all."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    files = [w.partition("=")[2] for w in words if w.startswith("--") and w.partition("=")[0] in _FILE_FLAGS]
    files += [w for i, w in enumerate(words) if i and words[i - 1] in _FILE_FLAGS]
    return sorted({f for f in files if "/" in f}, key=len, reverse=True)


def _without_paths(value, files: list[str] = ()):
    if isinstance(value, str):
        for file in files:
            value = value.replace(file, _file_name(file))
        return _hide_paths(value)
    if isinstance(value, dict):
        return {k: _without_paths(v, files) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_without_paths(v, files) for v in value]
    return value


def _shown_report(report: dict) -> dict:
    """The report as a page shows it: a file (a model, a dataset, a recalibration, a cache) by its name, never
    by its path on the server. The saved JSON keeps the paths, for the commands that read it."""
    files = _command_files(str(report.get("command") or ""))
    shown = {k: (v if k in ("workspace", "evaluation") else _without_paths(v, files)) for k, v in report.items()}
    shown["command"] = _shown_command(str(report.get("command") or ""))
    surrogate = shown.get("surrogate")
    if isinstance(surrogate, dict) and isinstance(surrogate.get("settings"), dict):
        # a learned surrogate's "model" is its file; an LLM's is the model's name, which may hold a "/"
        file_keys = {"trained_on", "cache"} | ({"model"} if surrogate.get("kind") != "llm" else set())
        surrogate["settings"] = {k: _file_name(v) if k in file_keys and isinstance(v, str) else v
                                 for k, v in surrogate["settings"].items()}
    for key in ("dataset", "discovery"):
        if isinstance(shown.get(key), dict):
            shown[key] = {k: v for k, v in shown[key].items() if k != "path"}
            if isinstance(shown[key].get("dataset"), dict):
                shown[key]["dataset"] = {k: v for k, v in shown[key]["dataset"].items() if k != "path"}
    return shown


def _columns(report: dict) -> list[tuple[str, dict]]:
    columns = [("as forecast", report["evaluation"])]
    for method, block in ((report.get("recalibration") or {}).get("methods") or {}).items():
        columns.append((f"after {method} recalibration", block["evaluation"]))
    return columns


def _table(columns: list[tuple[str, dict]]) -> dict:
    labels = [label for label, _ in metric_lines(columns[0][1])]
    values = [dict(_model_lines(block)) for _, block in columns]
    return {"titles": [t for t, _ in columns], "rows": [[label] + [v.get(label) for v in values] for label in labels]}


def _chart_data(report: dict) -> dict:
    return {
        "bins": [f"{b} {n}" for b, n in enumerate(DEFAULT_BINS.names, start=1)],
        "series": [{"title": title, "reliability": block["reliability"], "risk_coverage": block["risk_coverage"],
                    "confusion": block["confusion"]} for title, block in _columns(report)],
    }


def answering(block: dict | None) -> dict:
    """How many of an evaluation block's rows the model answered usably, and what that makes of its figures.

    `none`: rows were asked and not one answer was usable (every one refused, unreadable, or an error). The
    block's probability scores are then empty, but its recovered speedup is still a number: every row ranks
    last together, in the tie-break order, which is no result of the model's and is not to be shown as one.
    `partial`: some rows were answered; the probability scores cover only those, and recovered speedup, averaged
    over the problems' pools, holds the tie-break's figure for each pool with no answered row (`empty_pools`).
    A block without an `answered` count (a report older than the count) is taken as answered in full."""
    block = block or {}
    rows = int(block.get("rows") or 0)
    answered = block.get("answered")
    answered = rows if answered is None else int(answered)
    empty_pools = sorted(name for name, p in (block.get("per_problem") or {}).items()
                         if p.get("rows") and p.get("answered") == 0)
    return {"rows": rows, "answered": answered, "unanswered": max(0, rows - answered),
            "none": rows > 0 and answered == 0, "partial": 0 < answered < rows,
            "empty_pools": empty_pools if 0 < answered < rows else []}


def _model_lines(block: dict) -> list[tuple[str, float | None]]:
    """metric_lines, with nothing where the model answered no row (its figures would be the tie-break's)."""
    lines = metric_lines(block)
    return [(label, None) for label, _ in lines] if answering(block)["none"] else lines


def _pairs_answering(discovery: dict | None) -> dict | None:
    """answering() for the discovery pairs, whose block counts its `pairs` and their forecasts' `evaluation`."""
    if not discovery:
        return None
    evaluation = discovery.get("evaluation") or {}
    pairs = int(discovery.get("pairs") or evaluation.get("rows") or 0)
    answered = discovery.get("answered", evaluation.get("answered"))
    return answering({"rows": pairs, "answered": answered})


@login_required
def report_detail(request, report_id: str):
    try:
        report = _report(request.user, report_id)
        status = answering(report.get("evaluation"))
        problem = None if status["none"] else report_problem(report, charts=True)  # the charts' data
        if problem:
            raise _Unreadable(unreadable_message(f"{report_id}.json", problem))
    except _Unreadable as exc:
        return _unreadable_page(request, str(exc))
    report = _shown_report(report)
    others = [r for r in lab_report_list(workspaces=lab_workspace_list(user=request.user)) if r["id"] != report_id]
    common = {"report": report, "answering": status, "others": others,
              "discovery_answering": _pairs_answering(report.get("discovery")),
              "abstain_reasons": list(((report.get("evaluation") or {}).get("abstain_reasons") or {}).items())}
    if status["none"]:
        # No usable answer: no scores, no charts, no ranking; the page says so, with the reasons and the cost.
        return render(request, "kernellab/lab/report_detail.html",
                      {**common, "table": None, "charts": None, "figures": {}})
    columns = _columns(report)
    charts = _chart_data(report)
    table = _table(columns)
    table["answered"] = [answering(block) for _, block in columns]
    return render(request, "kernellab/lab/report_detail.html", {
        **common, "table": table, "charts": charts,
        "figures": lab_report_figures(bin_names=charts["bins"], series=charts["series"]),
    })


# lower is better for every metric except these (accuracies and recovered speedup)
_HIGHER_BETTER = {label for _, label, higher in METRIC_ROWS if higher} | {"recovered speedup"}


def _better(label: str, a, b) -> str:
    if a is None or b is None or a == b or label.startswith("  random") or label == "mean confidence":
        return ""
    higher = any(label.startswith(h) for h in _HIGHER_BETTER)
    return "a" if (a > b) == higher else "b"


@login_required
def report_compare(request):
    a_id, b_id = request.GET.get("a", ""), request.GET.get("b", "")
    reports = lab_report_list(workspaces=lab_workspace_list(user=request.user))
    if not a_id or not b_id:
        return render(request, "kernellab/lab/compare.html", {"reports": reports, "a_id": a_id, "b_id": b_id})
    try:
        a, b = _report(request.user, a_id, charts=True), _report(request.user, b_id, charts=True)
    except _Unreadable as exc:
        return _unreadable_page(request, str(exc))
    a, b = _shown_report(a), _shown_report(b)
    # A report whose model answered no row has no figures to compare: its tie-break ranking is left out.
    la, lb = dict(_model_lines(a["evaluation"])), dict(_model_lines(b["evaluation"]))
    rows = []
    for label, _ in metric_lines(a["evaluation"]):
        va, vb = la.get(label), lb.get(label)
        rows.append({"label": label, "a": va, "b": vb, "delta": (vb - va) if va is not None and vb is not None else None,
                     "better": _better(label, va, vb)})
    charts = {"bins": _chart_data(a)["bins"], "series": [
        {"title": f"A: {a.get('title') or a_id}", **{k: a["evaluation"][k] for k in ("reliability", "risk_coverage", "confusion")}},
        {"title": f"B: {b.get('title') or b_id}", **{k: b["evaluation"][k] for k in ("reliability", "risk_coverage", "confusion")}},
    ]}
    same_rows = (a.get("dataset") or {}).get("fingerprint") == (b.get("dataset") or {}).get("fingerprint")
    return render(request, "kernellab/lab/compare.html", {
        "reports": reports, "a_id": a_id, "b_id": b_id, "a": a, "b": b, "rows": rows, "charts": charts,
        "figures": lab_report_figures(bin_names=charts["bins"], series=charts["series"]),
        "same_rows": same_rows, "sides": [("A", a, answering(a["evaluation"])), ("B", b, answering(b["evaluation"]))],
    })
