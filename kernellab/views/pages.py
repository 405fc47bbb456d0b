from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from kernellab.models import Verification
from kernellab.selectors.discoveries import discovery_as_record, discovery_list
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
            "problems": workspace.problems.select_related("reference").all(),
            "runs": run_list(workspaces=[workspace])[:30],
            "pending_count": verification_pending(workspace=workspace).count(),
            "can_upload": user_can(user=request.user, workspace=workspace, action="upload"),
            "member_count": workspace.memberships.count(),
        },
    )


@login_required
def run_index(request, slug: str):
    workspace = workspace_for(request, slug)
    return render(request, "kernellab/run_list.html", {"workspace": workspace, "runs": run_list(workspaces=[workspace])})


@login_required
def verification_index(request, slug: str):
    workspace = workspace_for(request, slug)
    context = {
        "workspace": workspace,
        "pending": verification_pending(workspace=workspace),
        "active": verification_active(workspace=workspace),
        "recent": verification_queue(workspace=workspace, states=["done", "failed", "rejected", "cancelled"])[:30],
        "can_approve": user_can(user=request.user, workspace=workspace, action="approve"),
    }
    if request.htmx and request.GET.get("part") == "active":
        return render(request, "kernellab/partials/verification_active.html", context)
    return render(request, "kernellab/verification_queue.html", context)


@login_required
@require_POST
def verification_decide(request, slug: str):
    workspace = workspace_for(request, slug)
    ids = [i for i in map(db_id, request.POST.getlist("verification")) if i is not None]
    rows = Verification.objects.filter(pk__in=ids, node__run__problem__workspace=workspace)
    decision = request.POST.get("decision")
    if not ids:
        messages.error(request, "Select at least one verification first.")
    elif decision == "approve" and request.POST.get("reason", "").strip():
        # Approve with a reason for a rejection typed is ambiguous (and was what Enter in the reason box sent before Reject
        # became the form's first button): nothing is decided, since an approval cannot be taken back.
        messages.error(request, "A reason for a rejection came with Approve selected, so nothing was decided: "
                                "press Reject selected to reject, or empty the reason to approve.")
    elif decision == "approve":
        done, errors = verification_approve_many(verifications=rows, user=request.user)
        _report(request, done, "approved", errors)
    elif decision == "reject":
        done, errors = verification_reject_many(verifications=rows, user=request.user, reason=request.POST.get("reason", ""))
        _report(request, done, "rejected", errors)
    else:
        messages.error(request, "Choose approve or reject.")
    return redirect("verification-queue", slug=workspace.slug)


def _report(request, done: int, verb: str, errors: list[str]) -> None:
    if done:
        messages.success(request, f"{done} verification{'s' if done != 1 else ''} {verb}.")
    for error in sorted(set(errors)):
        messages.error(request, error)


@login_required
def discovery_index(request):
    workspaces = workspace_list_for_user(user=request.user)
    return render(request, "kernellab/discoveries.html", {"discoveries": discovery_list(workspaces=workspaces)})


@login_required
def discovery_export(request):
    workspaces = workspace_list_for_user(user=request.user)
    lines = [json.dumps(discovery_as_record(d)) for d in discovery_list(workspaces=workspaces)]
    response = HttpResponse("\n".join(lines) + ("\n" if lines else ""), content_type="application/x-ndjson")
    response["Content-Disposition"] = 'attachment; filename="discoveries.jsonl"'
    return response


def health(request):
    return JsonResponse({"ok": True})
