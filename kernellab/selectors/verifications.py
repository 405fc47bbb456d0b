from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Verification, VerificationState, Workspace


def verification_queue(*, workspace: Workspace, states: list[str] | None = None) -> QuerySet[Verification]:
    rows = Verification.objects.filter(node__run__problem__workspace=workspace).select_related(
        "node__run__problem", "node__kernel", "requested_by", "approver", "measurement"
    ).defer("node__run__driver_state")  # the search's state: megabytes per run, never shown in a list
    if states:
        rows = rows.filter(state__in=states)
    return rows.order_by("-created_at")


def verification_pending(*, workspace: Workspace) -> QuerySet[Verification]:
    return verification_queue(workspace=workspace, states=[VerificationState.PENDING]).order_by("created_at")


def verification_active(*, workspace: Workspace) -> QuerySet[Verification]:
    return verification_queue(workspace=workspace, states=[VerificationState.APPROVED, VerificationState.QUEUED, VerificationState.RUNNING])
