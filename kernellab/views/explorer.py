"""The live tree explorer: the page, its initial JSON snapshot, and the node panel with its actions.

Every action re-renders the panel; a refused action comes back as the service's sentence inside
the panel, never as an error page."""
from __future__ import annotations

import hashlib
import json
import logging

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db import IntegrityError
from django.http import Http404, JsonResponse
from django.shortcuts import render
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_POST

from kernellab.figures import forecast_figure
from kernellab.forms import CommentForm, DiscoveryForm, HumanChildForm
from kernellab.models import Verification, VerificationState
from kernellab.selectors.backends import run_wait_reason
from kernellab.selectors.explorer import bin_midpoints, node_children_count, node_story, run_tree_snapshot
from kernellab.selectors.runs import node_get
from kernellab.services import ServiceError
from kernellab.selectors.access import membership_role, user_can
from kernellab.services.comments import comment_create
from kernellab.services.discoveries import discovery_mark, discovery_unmark
from kernellab.services.verifications import run_gpu_use, verification_approve, verification_reject, verification_request
from kernellab.views.code import diff_unified, highlight_cuda, reasoning_html
from kernellab.views.common import db_id, run_for

log = logging.getLogger(__name__)

# A post that says approve and carries a reason to reject (what Enter in the reason box sent before the reason and
# Reject had a form of their own) is not taken as an approval: a GPU verification once approved cannot be taken back.
AMBIGUOUS_DECISION = ("A reason to reject came with Approve, so nothing was decided: press Reject to reject, "
                      "or empty the reason to approve.")

# The parts of an open panel that a change pushed over the websocket re-fetches (explorer.js refreshPanel).
PANEL_PARTS = {"live": "kernellab/explorer/panel_live.html", "comments": "kernellab/explorer/panel_comments.html",
               "discovery": "kernellab/explorer/panel_discovery.html"}


@login_required
def run_explorer(request, run_id: int):
    run = run_for(request, run_id)
    workspace = run.workspace
    can_run = user_can(user=request.user, workspace=workspace, action="run")
    if request.GET.get("part") == "controls":
        return render(request, "kernellab/runs/controls.html", {"run": run, "can_run": can_run, "wait_reason": run_wait_reason(run=run)})
    gpu = run_gpu_use(run=run)  # reads only: an ended run's count was stored where it changed (run_gpu_recount)
    # ?node= opens that node's panel; a key this run does not have selects nothing and says so.
    selected = request.GET.get("node", "").strip()
    missing_node = ""
    if selected and node_get(run=run, key=selected) is None:
        selected, missing_node = "", selected.replace("\x00", "")[:64]
    return render(
        request,
        "kernellab/explorer/explorer.html",
        {
            "run": run,
            "gpu": gpu,
            "workspace": workspace,
            "selected": selected,
            "missing_node": missing_node,
            "bin_midpoints": bin_midpoints(),
            "can_run": can_run,
            "wait_reason": run_wait_reason(run=run),
            "role": membership_role(user=request.user, workspace=workspace),
        },
    )


@login_required
@gzip_page
def run_tree_json(request, run_id: int):
    run = run_for(request, run_id)
    return JsonResponse(run_tree_snapshot(run=run))


def _node_for(request, run_id: int, key: str):
    run = run_for(request, run_id)
    node = node_get(run=run, key=key)
    if node is None:
        raise Http404("No such node in this run.")
    return run, node


# Highlighting is most of a panel's cost and a kernel's source never changes: rendered once, kept in
# Django's cache (shared by the web processes where Redis is configured, not in each one's memory).
# HTML_VERSION changes with the markup highlight_cuda writes, so that no page gets what an older release kept
# (2: line numbers out of the tab order).
HTML_VERSION = 2
def _cached_html(kind: str, render, *parts: str):
    key = f"html:{HTML_VERSION}:{kind}:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()
    try:
        kept = cache.get(key)
    except Exception as exc:  # an unreachable cache costs the highlighting, not the page
        log.warning("cache unreachable, rendering %s without it: %s", kind, exc)
        return render(*parts)
    if kept is None:
        kept = render(*parts)
        try:
            cache.set(key, kept)
        except Exception as exc:
            log.warning("cache unreachable, %s not kept: %s", kind, exc)
    return kept


def _source_html(source: str, anchor: str):
    return _cached_html("source", lambda text, mark: highlight_cuda(text, anchor=mark), source, anchor)


def _diff_html(before: str, after: str, before_name: str, after_name: str):
    return _cached_html("diff", lambda a, b, an, bn: diff_unified(a, b, before_name=an, after_name=bn),
                        before, after, before_name, after_name)


def _panel_context(request, run, node, *, error: str | None = None, notice: str | None = None, forms: dict | None = None) -> dict:
    workspace = run.workspace
    story = node_story(node=node)
    forecast = story.forecast
    parent = node.parent
    source = node.kernel.source if node.kernel else ""
    diff_html, added, removed = ("", 0, 0)
    if parent is not None and parent.kernel is not None and node.kernel is not None:
        diff_html, added, removed = _diff_html(parent.kernel.source, source, f"parent {parent.key}", f"node {node.key}")
    verifications = story.verifications
    pending = next((v for v in verifications if v.state == VerificationState.PENDING), None)
    open_verification = next((v for v in verifications if v.state in {"pending-approval", "approved", "queued", "running"}), None)
    measurements = story.measurements
    for m in measurements:
        # The root is the reference: a measurement of it times it against itself, so its ratio is the timing noise
        # (services.verifications._reference_measured; the node stays 1.0x).
        m.reference_noise_pct = abs(m.speedup - 1.0) * 100 if parent is None and m.status == "ok" and m.speedup else None
    forms = forms or {}
    compile_facts = (node.kernel.compiler_facts if node.kernel else {}) or {}
    if not compile_facts and measurements:
        compile_facts = measurements[0].compiler_facts or {}
    chart = None
    if forecast is not None and forecast.probabilities:
        from search_engine.bins import DEFAULT_BINS

        chart = forecast_figure(
            probabilities=[float(p) for p in forecast.probabilities], bin_names=list(DEFAULT_BINS.names),
            forecast_bin=forecast.bin,
            measured_bin=DEFAULT_BINS.bin_of(node.speedup) if node.speedup and node.speedup > 0 else None)
    return {
        "run": run,
        "node": node,
        "parent": parent,
        "workspace": workspace,
        "source_html": _source_html(source, f"n{node.pk}-") if source else None,
        "diff_html": diff_html,
        "diff_added": added,
        "diff_removed": removed,
        "forecast": forecast,
        "forecast_figure": json.dumps(chart) if chart else None,
        "reasoning_html": reasoning_html(forecast.reasoning) if forecast and forecast.reasoning else None,
        "measurements": measurements,
        "verifications": verifications[:5],
        "pending_verification": pending,
        "open_verification": open_verification,
        "compile_facts": compile_facts,
        "compile_errors": (node.kernel.compile_errors if node.kernel else []) or [],
        "comments": story.comments,
        "comments_total": story.comments_total,
        "discovery": story.discovery,
        "children_count": node_children_count(node=node),  # a new child changes the child, not this node
        "failed_proposals": story.failed_proposals,
        "comment_form": forms.get("comment") or CommentForm(),
        "discovery_form": forms.get("discovery") or DiscoveryForm(),
        "child_form": forms.get("child")
        or HumanChildForm(initial={"source": source, "launch": json.dumps(node.kernel.launch if node.kernel else [], indent=1)}),
        "can_comment": user_can(user=request.user, workspace=workspace, action="comment"),
        "can_discover": user_can(user=request.user, workspace=workspace, action="discover"),
        "can_request": user_can(user=request.user, workspace=workspace, action="request-verification"),
        "can_approve": user_can(user=request.user, workspace=workspace, action="approve"),
        "can_add_child": user_can(user=request.user, workspace=workspace, action="run"),
        "error": error,
        "notice": notice,
    }


def _render_panel(request, run, node, *, status: int = 200, **kwargs):
    context = _panel_context(request, run, node, **kwargs)
    if request.htmx:
        return render(request, "kernellab/explorer/panel.html", context, status=status)
    from kernellab.selectors.explorer import node_comments

    context["comments"] = node_comments(node=node)  # the node's own page: every comment, not the panel's latest
    return render(request, "kernellab/explorer/node_page.html", context, status=status)


@login_required
def node_panel(request, run_id: int, key: str):
    run, node = _node_for(request, run_id, key)
    part = request.GET.get("part")
    if part in PANEL_PARTS:
        return render(request, PANEL_PARTS[part], _panel_context(request, run, node))
    return _render_panel(request, run, node)


@login_required
@require_POST
def node_comment_create(request, run_id: int, key: str):
    run, node = _node_for(request, run_id, key)
    form = CommentForm(request.POST)
    if not form.is_valid():
        return _render_panel(request, run, node, error=_form_sentence(form), forms={"comment": form})
    try:
        comment_create(node=node, author=request.user, body=form.cleaned_data["body"])
    except ServiceError as exc:
        return _render_panel(request, run, node, error=str(exc), forms={"comment": form})
    return _render_panel(request, run, node, notice="Comment added.")


@login_required
@require_POST
def node_discovery_toggle(request, run_id: int, key: str):
    run, node = _node_for(request, run_id, key)
    form = DiscoveryForm(request.POST)
    if not form.is_valid():
        return _render_panel(request, run, node, error=_form_sentence(form), forms={"discovery": form})
    try:
        if request.POST.get("action") == "unmark":
            discovery_unmark(node=node, user=request.user)
            notice = "No longer marked as a discovery moment."
        else:
            discovery_mark(node=node, user=request.user, note=form.cleaned_data["note"])
            notice = "Marked as a discovery moment."
    except ServiceError as exc:
        node.refresh_from_db()  # someone else may have (un)marked it: the panel shows the node as it is now
        return _render_panel(request, run, node, error=str(exc), forms={"discovery": form})
    except IntegrityError:  # marked by someone else at the same moment: its one discovery is theirs
        node.refresh_from_db()
        return _render_panel(request, run, node, error="This node is already marked as a discovery.", forms={"discovery": form})
    node.refresh_from_db()
    return _render_panel(request, run, node, notice=notice)


@login_required
@require_POST
def node_verification_request(request, run_id: int, key: str):
    run, node = _node_for(request, run_id, key)
    try:
        verification_request(node=node, user=request.user)
    except ServiceError as exc:
        return _render_panel(request, run, node, error=str(exc))
    node.refresh_from_db()
    return _render_panel(request, run, node, notice="GPU verification requested.")


@login_required
@require_POST
def node_verification_decide(request, run_id: int, key: str):
    """Approve or reject this node's pending GPU verification."""
    run, node = _node_for(request, run_id, key)
    verification_id = db_id(request.POST.get("verification"))
    verification = None if verification_id is None else Verification.objects.filter(node=node, pk=verification_id).first()
    decision = request.POST.get("decision")
    try:
        if verification is None:
            raise ServiceError("That verification is not one of this node's.")
        if decision == "approve" and request.POST.get("reason", "").strip():
            raise ServiceError(AMBIGUOUS_DECISION)
        if decision == "approve":
            verification_approve(verification=verification, user=request.user)
            notice = "GPU verification approved and queued."
        elif decision == "reject":
            verification_reject(verification=verification, user=request.user, reason=request.POST.get("reason", ""))
            notice = "GPU verification rejected."
        else:
            raise ServiceError("Choose approve or reject.")
    except ServiceError as exc:
        return _render_panel(request, run, node, error=str(exc))
    node.refresh_from_db()
    return _render_panel(request, run, node, notice=notice)


@login_required
@require_POST
def node_child_create(request, run_id: int, key: str):
    """Add a hand-written candidate as a child of this node (the search service decides the rest)."""
    run, node = _node_for(request, run_id, key)
    form = HumanChildForm(request.POST)
    if not form.is_valid():
        return _render_panel(request, run, node, error=_form_sentence(form), forms={"child": form})
    from kernellab.services.search import node_add_human_child

    launch = form.cleaned_data["launch"]
    if launch is None:
        launch = node.kernel.launch if node.kernel else []
    try:
        child = node_add_human_child(node=node, user=request.user, source=form.cleaned_data["source"], launch=launch)
    except ServiceError as exc:
        return _render_panel(request, run, node, error=str(exc), forms={"child": form})
    child_key = getattr(child, "key", None)
    notice = f"Added your candidate as node {child_key}." if child_key else "Added your candidate."
    return _render_panel(request, run, node, notice=notice)


def _form_sentence(form) -> str:
    for field, errors in form.errors.items():
        label = form.fields[field].label or field.replace("_", " ") if field in form.fields else ""
        message = errors[0]
        return f"{label.capitalize()}: {message}" if label else message
    return "The form is not valid."
