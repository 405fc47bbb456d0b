from __future__ import annotations

from django.db.models import QuerySet

from kernellab.models import Membership, Workspace


def workspace_list_for_user(*, user) -> QuerySet[Workspace]:
    if user.is_superuser:
        return Workspace.objects.all().order_by("name")
    return Workspace.objects.filter(memberships__user=user).order_by("name")


def membership_list(*, workspace: Workspace) -> QuerySet[Membership]:
    return workspace.memberships.select_related("user").order_by("user__username")
