"""Who belongs to a workspace and with which role: adding people, invitation links, role changes, removal.

Every workspace keeps at least one admin member, because only an admin can add people or change roles:
a workspace without one could only be repaired by a server operator in Django admin.

An invitation lives only as long as its creator may grant it: removing a member, or making an admin
anything less, withdraws every open invitation they created (all of them, whatever their role: only
an admin can create or withdraw a link, so none outlives its creator's admin role), and accepting a
link checks again that its creator is still an active admin of the workspace."""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from kernellab.models import Invitation, Membership, Role, Workspace, invitation_token_hash
from kernellab.selectors.access import user_can
from kernellab.services.access import access_require
from kernellab.services.errors import ServiceError

INVITATION_DAYS = (1, 7, 30)
LAST_ADMIN_REASON = (
    "it needs at least one admin, because only an admin can add people, change roles or remove members"
)


@dataclass(frozen=True)
class IssuedInvitation:
    """A new invitation and its token; the token exists only here, the database keeps its hash."""

    invitation: Invitation
    token: str


def _state_refusal(invitation: Invitation, *, now=None) -> str | None:
    now = now or timezone.now()
    if invitation.revoked_at is not None:
        return f"This invitation to {invitation.workspace.name} was withdrawn by an admin; ask them for a new link."
    if invitation.accepted_at is not None:
        return f"This invitation to {invitation.workspace.name} has already been used; each link works once, so ask an admin for a new one."
    if invitation.expires_at <= now:
        return f"This invitation to {invitation.workspace.name} expired on {invitation.expires_at:%Y-%m-%d %H:%M} UTC; ask an admin for a new link."
    return None


def _inviter_refusal(invitation: Invitation) -> str | None:
    """Defence in depth behind the withdrawals on removal and demotion: the creator must still be an
    active admin of the workspace (granting any role takes the admin role, as creating the link did)."""
    inviter = invitation.created_by
    if inviter is not None and inviter.is_active and user_can(user=inviter, workspace=invitation.workspace, action="admin"):
        return None
    who = inviter.get_username() if inviter is not None else "the admin who created it"
    return (
        f"This invitation to {invitation.workspace.name} no longer works: {who} can no longer add people to "
        f"{invitation.workspace.name}; ask one of its admins for a new link."
    )


def invitation_refusal(invitation: Invitation, *, now=None) -> str | None:
    """Why this invitation can no longer be used, as a sentence; None while it is open and its creator may still grant it."""
    return _state_refusal(invitation, now=now) or _inviter_refusal(invitation)


def _withdraw_invitations_by(*, workspace: Workspace, creator) -> int:
    """Withdraws the open invitations `creator` made to `workspace`; returns how many. Used ones keep
    their record and expired ones their sentence."""
    return Invitation.objects.filter(
        workspace=workspace, created_by=creator, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).update(revoked_at=timezone.now())


def _role(role: str) -> Role:
    role = (role or "").strip()
    if not role:
        raise ServiceError("Choose a role.")
    if role not in Role.values:
        raise ServiceError(f"{role[:40]!r} is not a role; choose viewer, engineer, approver or admin.")
    return Role(role)


def _lock_workspace(workspace: Workspace) -> Workspace:
    # Serialises membership changes of one workspace, so two admins demoting each other at the
    # same moment cannot both pass the last-admin check.
    return Workspace.objects.select_for_update().get(pk=workspace.pk)


def _refuse_losing_the_last_admin(membership: Membership, *, verb: str) -> None:
    if membership.role != Role.ADMIN:
        return
    admins = Membership.objects.filter(workspace_id=membership.workspace_id, role=Role.ADMIN).count()
    if admins <= 1:
        raise ServiceError(
            f"{membership.user.get_username()} is the last admin of {membership.workspace.name} and cannot be {verb}: "
            f"{LAST_ADMIN_REASON}. Make someone else an admin first."
        )


def _names_alike(username: str):
    """The accounts whose name is `username` but for capitals, in any script. PostgreSQL's iexact (UPPER = UPPER)
    folds every letter, SQLite's (LIKE) only ASCII ones, so that there `ÉMILE` and `émile` both signed up; a regular
    expression ignoring case is Python's own `re` on SQLite and `~*` on PostgreSQL, both Unicode-aware."""
    import re

    return get_user_model().objects.filter(username__iregex=rf"^{re.escape(username)}$")


def _account_named(username: str):
    """The active account with exactly this user name, or, when none has it exactly, the one whose name differs
    only in capitals. When several do (Carol and CAROL for carol: only an operator can make such a pair), which
    one was meant is not guessed. An exact match that is deactivated is no one: another account is never chosen
    in its place."""
    User = get_user_model()
    # Compared here as well: a database whose collation ignores case answers `=` like iexact.
    person = next((found for found in User.objects.filter(username=username) if found.get_username() == username), None)
    if person is not None:
        return person if person.is_active else None
    matches = list(_names_alike(username)[:2])
    if len(matches) > 1:
        raise ServiceError(
            f"More than one account has the user name {username!r} in different capitals; "
            "enter the user name exactly as it is written, capitals included."
        )
    person = matches[0] if matches else None
    return person if person is not None and person.is_active else None


@transaction.atomic
def membership_add(*, workspace: Workspace, user, username: str, role: str) -> Membership:
    """An admin adds a person who already has an account, by user name."""
    workspace = _lock_workspace(workspace)
    access_require(user=user, workspace=workspace, action="admin")
    role = _role(role)
    # NFKC, as log-in and sign-up read a name: a fullwidth or compatibility spelling finds the account it logs in as.
    username = get_user_model().normalize_username((username or "").strip())
    if not username:
        raise ServiceError("Enter the user name of the person to add.")
    person = _account_named(username)
    if person is None:
        raise ServiceError(f"No one has the user name {username!r}; create an invitation link for them instead.")
    existing = Membership.objects.filter(workspace=workspace, user=person).first()
    if existing is not None:
        raise ServiceError(
            f"{person.get_username()} is already a member of {workspace.name} as {existing.role}; change their role in the list instead."
        )
    return Membership.objects.create(workspace=workspace, user=person, role=role)


@transaction.atomic
def membership_invite(*, workspace: Workspace, user, role: str, valid_days: int = 7, note: str = "") -> IssuedInvitation:
    """An admin creates a single-use link that lets its holder join with `role` for `valid_days` days."""
    access_require(user=user, workspace=workspace, action="admin")
    role = _role(role)
    if valid_days not in INVITATION_DAYS:
        raise ServiceError(f"An invitation can be valid for {', '.join(map(str, INVITATION_DAYS))} days, not {valid_days}.")
    note = (note or "").strip()
    if len(note) > 200:
        raise ServiceError(f"The note can be at most 200 characters long; this one has {len(note)}.")
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        workspace=workspace,
        role=role,
        token_hash=invitation_token_hash(token),
        note=note,
        created_by=user,
        expires_at=timezone.now() + timedelta(days=valid_days),
    )
    return IssuedInvitation(invitation=invitation, token=token)


@transaction.atomic
def invitation_revoke(*, invitation: Invitation, user) -> Invitation:
    access_require(user=user, workspace=invitation.workspace, action="admin")
    if _state_refusal(invitation) is not None:
        raise ServiceError("This invitation was already used, withdrawn or expired, so there is nothing to withdraw.")
    Invitation.objects.filter(pk=invitation.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    invitation.refresh_from_db()
    return invitation


@transaction.atomic
def invitation_accept(*, token: str, user) -> Membership:
    """The logged-in `user` joins the invitation's workspace with its role; the link is used up."""
    if user is None or not user.is_authenticated:
        raise ServiceError("Log in or create an account to accept this invitation.")
    token_hash = invitation_token_hash(token or "")
    found = Invitation.objects.filter(token_hash=token_hash).values_list("workspace_id", flat=True).first()
    if found is None:
        raise ServiceError("This invitation link is not valid; check that it was copied whole, or ask an admin for a new one.")
    # The workspace first, as removals and role changes lock it (then its invitations): the same order
    # cannot deadlock, and the creator's role read below cannot change before this acceptance commits.
    workspace = Workspace.objects.select_for_update().get(pk=found)
    invitation = Invitation.objects.select_related("workspace").select_for_update().get(token_hash=token_hash)
    refusal = invitation_refusal(invitation)
    if refusal is not None:
        raise ServiceError(refusal)
    existing = Membership.objects.filter(workspace=workspace, user=user).first()
    if existing is not None:
        raise ServiceError(
            f"You are already a member of {workspace.name} as {existing.role}; the invitation is left unused for the person it was meant for."
        )
    # Single use even if two people open the link at the same moment: only one conditional update wins.
    used = Invitation.objects.filter(
        pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).update(accepted_at=timezone.now(), accepted_by=user)
    if used != 1:
        raise ServiceError(f"This invitation to {workspace.name} was used a moment ago by someone else; ask an admin for a new link.")
    return Membership.objects.create(workspace=workspace, user=user, role=invitation.role)


def _one_sentence(messages: list[str]) -> str:
    """Django's password messages ("This password is too short. It must contain at least 8 characters.", "This
    password is too common.") as one sentence: their sentences joined with semicolons."""
    parts = [part.rstrip(".") for message in messages for part in re.split(r"(?<=\.)\s+", message.strip()) if part]
    if not parts:
        return "Choose another password."
    return "; ".join([parts[0], *(part[:1].lower() + part[1:] for part in parts[1:])]) + "."


@transaction.atomic
def invitation_accept_new_user(*, token: str, username: str, password: str):
    """Someone without an account chooses a user name and password and joins with the invitation; returns the new user."""
    invitation = Invitation.objects.select_related("workspace").filter(token_hash=invitation_token_hash(token or "")).first()
    if invitation is None:
        raise ServiceError("This invitation link is not valid; check that it was copied whole, or ask an admin for a new one.")
    refusal = invitation_refusal(invitation)
    if refusal is not None:
        raise ServiceError(refusal)
    User = get_user_model()
    # As the account will store it and log-in will read it (NFKC: "ａｌｉｃｅ" is "alice"), before any check, so
    # that a look-alike of a taken name is refused as taken rather than failing on the unique constraint.
    username = User.normalize_username((username or "").strip()).strip()
    if not username:
        raise ServiceError("Choose a user name.")
    try:
        User.username_validator(username)
    except ValidationError:
        raise ServiceError("A user name can only contain letters, digits and @ . + - _ characters.") from None
    if len(username) > 150:
        raise ServiceError("A user name can be at most 150 characters long.")
    taken = f"The user name {username!r} is taken; choose another, or log in if it is yours."
    if _names_alike(username).exists():
        raise ServiceError(taken)
    candidate = User(username=username)
    try:
        validate_password(password, user=candidate)
    except ValidationError as exc:
        raise ServiceError(_one_sentence(exc.messages)) from None
    try:
        with transaction.atomic():
            person = User.objects.create_user(username=username, password=password)
    except IntegrityError:  # someone took the name between the check and now
        raise ServiceError(taken) from None
    invitation_accept(token=token, user=person)
    return person


@transaction.atomic
def membership_change_role(*, membership: Membership, user, role: str) -> Membership:
    _lock_workspace(membership.workspace)
    access_require(user=user, workspace=membership.workspace, action="admin")
    role = _role(role)
    membership = Membership.objects.select_related("workspace", "user").filter(pk=membership.pk).first()
    if membership is None:
        raise ServiceError("This person is no longer a member; reload the page.")
    if membership.role == role:
        membership.withdrawn_invitations = 0
        return membership
    if role != Role.ADMIN:
        _refuse_losing_the_last_admin(membership, verb=f"made {role}")
    was_admin = membership.role == Role.ADMIN
    membership.role = role
    membership.save(update_fields=["role"])
    # Only an admin can create or withdraw invitation links, so an admin made anything less loses
    # all of theirs, whatever role each grants (not only those above the new role).
    membership.withdrawn_invitations = (
        _withdraw_invitations_by(workspace=membership.workspace, creator=membership.user) if was_admin else 0
    )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, user) -> int:
    """Removes the member and withdraws the open invitations they created; returns how many were withdrawn."""
    _lock_workspace(membership.workspace)
    access_require(user=user, workspace=membership.workspace, action="admin")
    membership = Membership.objects.select_related("workspace", "user").filter(pk=membership.pk).first()
    if membership is None:
        raise ServiceError("This person is no longer a member; reload the page.")
    _refuse_losing_the_last_admin(membership, verb="removed")
    membership.delete()
    return _withdraw_invitations_by(workspace=membership.workspace, creator=membership.user)
