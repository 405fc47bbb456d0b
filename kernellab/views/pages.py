from __future__ import annotations

import json
from itertools import islice

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.db.models import Count
from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kernellab.models import Verification
from kernellab.selectors.discoveries import discovery_as_record
from kernellab.selectors.runs import run_list
from kernellab.selectors.verifications import verification_active, verification_pending, verification_queue
from kernellab.selectors.workspaces import workspace_list_for_user
from kernellab.selectors.access import membership_role, user_can
from kernellab.services.verifications import verification_approve_many, verification_reject_many
from kernellab.views.common import db_id, workspace_for


@login_required
def home(request):
    workspaces = workspace_list_for_user(user=request.user)
    if workspaces.count() == 1:
        return redirect("workspace", slug=workspaces.first().slug)
    return render(request, "kernellab/home.html", {"workspaces": workspaces, "runs": run_list(workspaces=workspaces)[:20]})


@login_required
def workspace_detail(request, slug: str):
    workspace = workspace_for(request, slug)
    return render(
        request,
        "kernellab/workspace.html",
        {
            "workspace": workspace,
            "role": membership_role(user=request.user, workspace=workspace),
            # what the table shows, the runs counted in the same query (not a query a problem)
            "problems": workspace.problems.only("pk", "title", "description", "family_source", "name")
                        .annotate(run_count=Count("runs")),
            "runs": run_list(workspaces=[workspace])[:30],
            "pending_count": verification_pending(workspace=workspace).count(),
            "can_upload": user_can(user=request.user, workspace=workspace, action="upload"),
            "member_count": workspace.memberships.count(),
        },
    )


@login_required
def run_index(request, slug: str):
    """The workspace's runs, newest first, a page at a time (RUNS_PER_PAGE); `?problem=<id>`: only that problem's."""
    from django.core.paginator import Paginator
    from django.http import Http404

    from kernellab.selectors.runs import RUNS_PER_PAGE

    workspace = workspace_for(request, slug)
    problem = None
    if "problem" in request.GET:
        problem = workspace.problems.filter(pk=db_id(request.GET["problem"])).only("pk", "title").first()
        if problem is None:
            raise Http404("No such problem in this workspace.")
    page = Paginator(run_list(workspaces=[workspace], problem=problem), RUNS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "kernellab/run_list.html", {"workspace": workspace, "problem": problem, "page": page})


@login_required
def verification_index(request, slug: str):
    workspace = workspace_for(request, slug)
    if request.htmx and request.GET.get("part") == "active":
        return render(request, "kernellab/partials/verification_active.html", _queue_context(request, workspace))
    return _queue_page(request, workspace, page_number=request.GET.get("page"))


def _queue_context(request, workspace) -> dict:
    from kernellab.selectors.verifications import ACTIVE_SHOWN

    active = verification_active(workspace=workspace)
    return {
        "workspace": workspace,
        "active": active[:ACTIVE_SHOWN],
        "active_count": active.count(),
        "recent": verification_queue(workspace=workspace, states=["done", "failed", "rejected", "cancelled"])[:30],
        "can_approve": user_can(user=request.user, workspace=workspace, action="approve"),
    }


def _queue_page(request, workspace, *, page_number, selected=(), reason: str = ""):
    """The queue's page; a decision refused is answered with it again, the ticks and the reason as they were sent."""
    from django.core.paginator import Paginator

    from kernellab.selectors.verifications import PENDING_PER_PAGE

    context = _queue_context(request, workspace)
    page = Paginator(verification_pending(workspace=workspace), PENDING_PER_PAGE).get_page(page_number)
    context.update(page=page, pending=page.object_list, selected=set(selected), reason=reason)
    return render(request, "kernellab/verification_queue.html", context)


@login_required
@require_POST
def verification_decide(request, slug: str):
    workspace = workspace_for(request, slug)
    ids = [i for i in map(db_id, request.POST.getlist("verification")) if i is not None]
    rows = Verification.objects.filter(pk__in=ids, node__run__problem__workspace=workspace)
    decision = request.POST.get("decision")
    reason = request.POST.get("reason", "")
    refusal = None
    if not ids:
        refusal = "Select at least one verification first."
    elif decision == "approve" and reason.strip():
        # Approve with a reason for a rejection typed is ambiguous (and was what Enter in the reason box sent before Reject
        # became the form's first button): nothing is decided, since an approval cannot be taken back.
        refusal = ("A reason for a rejection came with Approve selected, so nothing was decided: "
                   "press Reject selected to reject, or empty the reason to approve.")
    elif decision not in ("approve", "reject"):
        refusal = "Choose approve or reject."
    if refusal is not None:
        # Nothing was decided: the same page again, with what was ticked and typed, so a long selection is not lost.
        messages.error(request, refusal)
        return _queue_page(request, workspace, page_number=request.POST.get("page"), selected=[row.pk for row in rows],
                           reason=reason)
    if decision == "approve":
        done, errors = verification_approve_many(verifications=rows, user=request.user)
        _report(request, done, "approved", errors)
    elif decision == "reject":
        done, errors = verification_reject_many(verifications=rows, user=request.user, reason=reason)
        _report(request, done, "rejected", errors)
    return redirect("verification-queue", slug=workspace.slug)


def _report(request, done: int, verb: str, errors: list[str]) -> None:
    if done:
        messages.success(request, f"{done} verification{'s' if done != 1 else ''} {verb}.")
    for error in sorted(set(errors)):
        messages.error(request, error)


@login_required
def discovery_index(request):
    """The discoveries of the user's workspaces, newest first, a page at a time (DISCOVERIES_PER_PAGE)."""
    from django.core.paginator import Paginator

    from kernellab.selectors.discoveries import DISCOVERIES_PER_PAGE, discovery_page_rows

    workspaces = workspace_list_for_user(user=request.user)
    page = Paginator(discovery_page_rows(workspaces=workspaces), DISCOVERIES_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "kernellab/discoveries.html", {"page": page, "discoveries": page.object_list})


@login_required
def discovery_export(request):
    """Every discovery of the user's workspaces as a JSON line (discovery_as_record), streamed from a database cursor:
    the export holds two kernel sources a row, so it is never built in memory whole."""
    from kernellab.selectors.discoveries import discovery_export_rows

    workspaces = workspace_list_for_user(user=request.user)
    rows = discovery_export_rows(workspaces=workspaces).iterator(chunk_size=200)
    lines = (json.dumps(discovery_as_record(d)) + "\n" for d in rows)

    def chunks():  # about 200 lines a write
        while chunk := "".join(islice(lines, 200)):
            yield chunk

    if isinstance(request, ASGIRequest):
        # Served by daphne: a synchronous iterator would be read whole into a list before the first byte is sent.
        next_chunk = sync_to_async(lambda it=chunks(): next(it, None), thread_sensitive=True)

        async def streamed():
            while (chunk := await next_chunk()) is not None:
                yield chunk

        content = streamed()
    else:
        content = chunks()
    response = StreamingHttpResponse(content, content_type="application/x-ndjson")
    response["Content-Disposition"] = 'attachment; filename="discoveries.jsonl"'
    return response


def health(request):
    return JsonResponse({"ok": True})
