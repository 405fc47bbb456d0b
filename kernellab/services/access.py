from __future__ import annotations

from kernellab.models import Workspace
from kernellab.selectors.access import ACTION_ROLE, membership_role, user_can
from kernellab.services.errors import PermissionDenied

# What each action of ACTION_ROLE lets a person do, as a refusal names it ("You need the engineer role or above to
# mark discovery moments in Team"): the codes themselves ("discover", "run", "admin") read oddly in a sentence.
ACTION_PHRASE = {
    "view": "see this workspace",
    "comment": "comment on nodes",
    "upload": "upload or change problems and datasets",
    "run": "start, steer or add candidates to runs",
    "discover": "mark discovery moments",
    "request-verification": "request GPU verifications",
    "approve": "approve or reject GPU verifications",
    "admin": "manage members and invitations",
}


def access_require(*, user, workspace: Workspace, action: str) -> None:
    if user_can(user=user, workspace=workspace, action=action):
        return
    role = membership_role(user=user, workspace=workspace)
    if role is None:
        raise PermissionDenied(f"You are not a member of the workspace {workspace.name}.")
    needed = ACTION_ROLE[action]
    article = "an" if str(role)[:1].lower() in ("a", "e", "i", "o", "u") else "a"
    phrase = ACTION_PHRASE.get(action) or action.replace("-", " ")
    raise PermissionDenied(f"You need the {needed.label.lower()} role or above to {phrase} in {workspace.name}; you are {article} {role}.")
