from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from kernellab.models import Invitation, Membership, Workspace, invitation_token_hash


def workspace_list_for_user(*, user) -> QuerySet[Workspace]:
    if user.is_superuser:
        return Workspace.objects.all().order_by("name")
    return Workspace.objects.filter(memberships__user=user).order_by("name")


def membership_list(*, workspace: Workspace) -> QuerySet[Membership]:
    return workspace.memberships.select_related("user").order_by("user__username")


def invitation_list_open(*, workspace: Workspace) -> QuerySet[Invitation]:
    """Invitations of the workspace that can still be accepted, newest first."""
    return workspace.invitations.select_related("created_by").filter(
        accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).order_by("-created_at")


def invitation_for_token(*, token: str) -> Invitation | None:
    return Invitation.objects.select_related("workspace").filter(token_hash=invitation_token_hash(token or "")).first()
