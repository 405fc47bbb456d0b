from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Verification, VerificationState, Workspace


def verification_queue(*, workspace: Workspace, states: list[str] | None = None) -> QuerySet[Verification]:
    rows = Verification.objects.filter(node__run__problem__workspace=workspace).select_related(
        "node__run__problem", "requested_by", "approver", "measurement"
    ).defer(  # never shown in a list: the search's state (megabytes per run), the problem's sources, the node's texts
        "node__run__driver_state", "node__run__problem__spec_toml", "node__run__problem__family_source",
        "node__run__problem__reference_measurements", "node__rationale", "node__failed_proposals", "node__state_reason")
    if states:
        rows = rows.filter(state__in=states)
    return rows.order_by("-created_at")


# The queue page shows the requests awaiting approval a page at a time, and at most this many queued or running jobs
# (it polls that table every 2 s), with how many there are in all.
PENDING_PER_PAGE = 100
ACTIVE_SHOWN = 100


def verification_pending(*, workspace: Workspace) -> QuerySet[Verification]:
    return verification_queue(workspace=workspace, states=[VerificationState.PENDING]).order_by("created_at")


def verification_active(*, workspace: Workspace) -> QuerySet[Verification]:
    return verification_queue(workspace=workspace, states=[VerificationState.APPROVED, VerificationState.QUEUED, VerificationState.RUNNING])
