"""Who may do what in a workspace: the role a user holds there, and whether it allows an action."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from kernellab.models import ROLE_RANK, Membership, Role, Workspace

# One page asks for the same role many times (each button it may show): within one request the
# answer is read once. Outside a request (tasks, commands, tests of services) nothing is kept.
_ROLES: ContextVar[dict | None] = ContextVar("kernellab_roles", default=None)

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
    remembered = _ROLES.get()
    key = (user.pk, workspace.pk)
    if remembered is not None and key in remembered:
        return remembered[key]
    membership = Membership.objects.filter(workspace=workspace, user=user).only("role").first()
    role = membership.role if membership else None
    if remembered is not None:
        remembered[key] = role
    return role


@contextmanager
def roles_remembered():
    token = _ROLES.set({})
    try:
        yield
    finally:
        _ROLES.reset(token)


@receiver([post_save, post_delete], sender=Membership)
def roles_forget(**kwargs) -> None:
    """A membership changed: the rest of this request reads roles afresh."""
    remembered = _ROLES.get()
    if remembered is not None:
        remembered.clear()


class RolesPerRequestMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with roles_remembered():
            return self.get_response(request)


def user_can(*, user, workspace: Workspace, action: str) -> bool:
    role = membership_role(user=user, workspace=workspace)
    return role is not None and ROLE_RANK[role] >= ROLE_RANK[ACTION_ROLE[action]]
