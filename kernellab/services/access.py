from __future__ import annotations

from kernellab.models import Workspace
from kernellab.selectors.access import ACTION_ROLE, membership_role, user_can
from kernellab.services.errors import PermissionDenied


def access_require(*, user, workspace: Workspace, action: str) -> None:
    if user_can(user=user, workspace=workspace, action=action):
        return
    role = membership_role(user=user, workspace=workspace)
    if role is None:
        raise PermissionDenied(f"You are not a member of the workspace {workspace.name}.")
    needed = ACTION_ROLE[action]
    article = "an" if str(role)[:1].lower() in ("a", "e", "i", "o", "u") else "a"
    raise PermissionDenied(
        f"You need the {needed.label.lower()} role or above to {action.replace('-', ' ')} in {workspace.name}; you are {article} {role}."
    )
