"""The surrogate lab pages: datasets and evaluation reports (JSON files under DATA_DIR), one report with
its charts, and two reports side by side."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kernellab.management.commands.import_dataset import datasets_dir, reports_dir
from kernellab.models import Membership, Role
from search_engine.bins import DEFAULT_BINS
from search_engine.lab.datasets import DatasetError, read_dataset, write_dataset
from search_engine.lab.evaluation import METRIC_ROWS, metric_lines
from search_engine.lab.reports import ReportNotFound, list_reports, load_report

_UPLOAD_LIMIT = 64 * 1024 * 1024


def _datasets() -> list[dict]:
    folder = datasets_dir()
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, "rb") as handle:
            rows = sum(1 for line in handle if line.strip())
        out.append({"name": path.stem, "rows": rows, "bytes": path.stat().st_size, "path": str(path)})
    return out


def _can_import(user) -> bool:
    return user.is_superuser or Membership.objects.filter(
        user=user, role__in=[Role.ENGINEER, Role.APPROVER, Role.ADMIN]).exists()


@login_required
def lab_index(request):
    return render(request, "kernellab/lab/index.html", {
        "datasets": _datasets(), "reports": list_reports(reports_dir())[:10], "can_import": _can_import(request.user),
    })


@login_required
@require_POST
def dataset_upload(request):
    """The import command's checks from the browser: all rows good, or nothing stored and every problem listed."""
    if not _can_import(request.user):
        messages.error(request, "Importing a dataset needs the engineer role in a workspace.")
        return redirect("lab")
    upload = request.FILES.get("file")
    name = (request.POST.get("name") or "").strip()
    context = {"datasets": _datasets(), "reports": list_reports(reports_dir())[:10], "can_import": True}
    if upload is None:
        messages.error(request, "Choose a .jsonl or .csv file to import.")
        return redirect("lab")
    suffix = re.sub(r"^.*?((\.jsonl|\.ndjson|\.csv)(\.gz)?)$", r"\1", upload.name.lower())
    if suffix not in (".jsonl", ".ndjson", ".csv", ".jsonl.gz", ".csv.gz"):
        messages.error(request, "A dataset file ends in .jsonl, .jsonl.gz or .csv.")
        return redirect("lab")
    name = name or re.sub(r"\.(jsonl|ndjson|csv)(\.gz)?$", "", Path(upload.name).name)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name):
        messages.error(request, f"Dataset name {name!r}: use letters, digits, '-' and '_' only.")
        return redirect("lab")
    target = datasets_dir() / f"{name}.jsonl"
    if target.exists() and not request.POST.get("replace"):
        messages.error(request, f"A dataset named {name!r} exists already; tick 'replace' or choose another name.")
        return redirect("lab")
    if upload.size > _UPLOAD_LIMIT:
        messages.error(request, f"The file is larger than {_UPLOAD_LIMIT // (1024 * 1024)} MiB; use manage.py import_dataset.")
        return redirect("lab")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"upload{suffix}"
        with open(path, "wb") as handle:
            for chunk in upload.chunks():
                handle.write(chunk)
        try:
            dataset = read_dataset(path, default_source=f"imported:{Path(upload.name).name}")
        except DatasetError as exc:
            context.update({"upload_errors": [str(e) for e in exc.errors[:200]], "upload_error_count": len(exc.errors),
                            "upload_summary": str(exc).splitlines()[0].replace(str(path), upload.name),
                            "upload_name": upload.name})
            return render(request, "kernellab/lab/index.html", context, status=400)
    write_dataset(target, dataset.rows)
    messages.success(request, f"Imported {len(dataset)} {dataset.kind} rows as '{name}'.")
    return redirect("lab")


@login_required
def report_list(request):
    return render(request, "kernellab/lab/report_list.html", {"reports": list_reports(reports_dir())})


def _report(report_id: str) -> dict:
    try:
        return load_report(reports_dir(), report_id)
    except ReportNotFound:
        raise Http404("No such report.") from None


def _columns(report: dict) -> list[tuple[str, dict]]:
    columns = [("as forecast", report["evaluation"])]
    for method, block in ((report.get("recalibration") or {}).get("methods") or {}).items():
        columns.append((f"after {method} recalibration", block["evaluation"]))
    return columns


def _table(columns: list[tuple[str, dict]]) -> dict:
    labels = [label for label, _ in metric_lines(columns[0][1])]
    values = [dict(metric_lines(block)) for _, block in columns]
    return {"titles": [t for t, _ in columns], "rows": [[label] + [v.get(label) for v in values] for label in labels]}


def _chart_data(report: dict) -> dict:
    return {
        "bins": [f"{b} {n}" for b, n in enumerate(DEFAULT_BINS.names, start=1)],
        "series": [{"title": title, "reliability": block["reliability"], "risk_coverage": block["risk_coverage"],
                    "confusion": block["confusion"]} for title, block in _columns(report)],
    }


@login_required
def report_detail(request, report_id: str):
    report = _report(report_id)
    return render(request, "kernellab/lab/report_detail.html", {
        "report": report, "table": _table(_columns(report)), "charts": _chart_data(report),
        "others": [r for r in list_reports(reports_dir()) if r["id"] != report_id],
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
    reports = list_reports(reports_dir())
    if not a_id or not b_id:
        return render(request, "kernellab/lab/compare.html", {"reports": reports, "a_id": a_id, "b_id": b_id})
    a, b = _report(a_id), _report(b_id)
    la, lb = dict(metric_lines(a["evaluation"])), dict(metric_lines(b["evaluation"]))
    rows = []
    for label, _ in metric_lines(a["evaluation"]):
        va, vb = la.get(label), lb.get(label)
        rows.append({"label": label, "a": va, "b": vb, "delta": (vb - va) if va is not None and vb is not None else None,
                     "better": _better(label, va, vb)})
    charts = {"bins": _chart_data(a)["bins"], "series": [
        {"title": f"A: {a['title']}", **{k: a["evaluation"][k] for k in ("reliability", "risk_coverage", "confusion")}},
        {"title": f"B: {b['title']}", **{k: b["evaluation"][k] for k in ("reliability", "risk_coverage", "confusion")}},
    ]}
    same_rows = a["dataset"].get("fingerprint") == b["dataset"].get("fingerprint")
    return render(request, "kernellab/lab/compare.html", {
        "reports": reports, "a_id": a_id, "b_id": b_id, "a": a, "b": b, "rows": rows, "charts": charts,
        "same_rows": same_rows,
    })
