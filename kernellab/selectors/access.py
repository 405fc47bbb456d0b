"""Who may do what in a workspace: the role a user holds there, and whether it allows an action."""
from __future__ import annotations

from kernellab.models import ROLE_RANK, Membership, Role, Workspace

ACTION_ROLE = {
    "view": Role.VIEWER,
    "comment": Role.ENGINEER,
    "upload": Role.ENGINEER,
    "run": Role.ENGINEER,
    "discover": Role.ENGINEER,
    "request-verification": Role.ENGINEER,
    "approve": Role.APPROVER,
    "admin": Role.ADMIN,
}


def membership_role(*, user, workspace: Workspace) -> str | None:
    if user is None or not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.ADMIN
    membership = Membership.objects.filter(workspace=workspace, user=user).only("role").first()
    return membership.role if membership else None


def user_can(*, user, workspace: Workspace, action: str) -> bool:
    role = membership_role(user=user, workspace=workspace)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[ACTION_ROLE[action]]
