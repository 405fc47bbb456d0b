"""A workspace's members: the list every member sees, and the admin's forms to add, invite, change
roles and remove; the invitation page where someone accepts a link."""
from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from kernellab.models import Invitation, Membership, Role
from kernellab.selectors.workspaces import invitation_for_token, invitation_list_open, membership_list
from kernellab.services import PermissionDenied, ServiceError
from kernellab.selectors.access import membership_role, user_can
from kernellab.services.access import access_require
from kernellab.services.memberships import (
    INVITATION_DAYS,
    LAST_ADMIN_REASON,
    invitation_accept,
    invitation_accept_new_user,
    invitation_refusal,
    invitation_revoke,
    membership_add,
    membership_change_role,
    membership_invite,
    membership_remove,
)
from kernellab.views.common import workspace_for


def _members_context(request, workspace, **extra) -> dict:
    can_admin = user_can(user=request.user, workspace=workspace, action="admin")
    return {
        "workspace": workspace,
        "role": membership_role(user=request.user, workspace=workspace),
        "can_admin": can_admin,
        "memberships": membership_list(workspace=workspace),
        "invitations": invitation_list_open(workspace=workspace) if can_admin else [],
        "roles": Role.choices,
        "invitation_days": INVITATION_DAYS,
        "last_admin_reason": LAST_ADMIN_REASON,
        "error": None,
        "notice": None,
        "invitation_link": None,
        **extra,
    }


def _render_members(request, workspace, *, status: int = 200, **extra):
    context = _members_context(request, workspace, **extra)
    if request.htmx:
        # htmx swaps only 2xx answers; the sentence in the panel carries the refusal.
        return render(request, "kernellab/members/_panel.html", context)
    return render(request, "kernellab/members/list.html", context, status=status)


def _perform(request, workspace, change, *, notice, **extra):
    """Runs `change`; the page shows its refusal, or `notice` (a format string or a function of the result)."""
    try:
        result = change()
    except PermissionDenied as exc:
        return render(request, "kernellab/members/list.html", _members_context(request, workspace, error=str(exc)), status=403)
    except ServiceError as exc:
        return _render_members(request, workspace, status=400, error=str(exc))
    text = notice(result) if callable(notice) else notice.format(result=result)
    return _render_members(request, workspace, notice=text, **extra)


def _withdrawn(count: int) -> str:
    """The sentence a notice ends with when a removal or demotion withdrew the person's invitation links."""
    if count == 0:
        return ""
    if count == 1:
        return " The open invitation link they created was withdrawn."
    return f" The {count} open invitation links they created were withdrawn."


def _membership(workspace, membership_id: int) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user", "workspace"), pk=membership_id, workspace=workspace)


@login_required
def member_list(request, slug: str):
    return _render_members(request, workspace_for(request, slug))


@login_required
@require_POST
def member_add(request, slug: str):
    workspace = workspace_for(request, slug)
    username, role = request.POST.get("username", ""), request.POST.get("role", "")
    return _perform(
        request, workspace,
        lambda: membership_add(workspace=workspace, user=request.user, username=username, role=role),
        notice="{result.user.username} joined as {result.role}.",
    )


@login_required
@require_POST
def member_invite(request, slug: str):
    workspace = workspace_for(request, slug)
    try:
        valid_days = int(request.POST.get("valid_days", "7"))
    except ValueError:
        valid_days = None
    if valid_days is None:
        # Not a number (the form offers only a list): checked after the admin right, so a
        # non-admin still gets the 403 and nothing about the form.
        def refuse():
            access_require(user=request.user, workspace=workspace, action="admin")
            raise ServiceError(
                f"Choose for how many days the link is valid: {', '.join(map(str, INVITATION_DAYS[:-1]))} or {INVITATION_DAYS[-1]}."
            )
        return _perform(request, workspace, refuse, notice="")
    try:
        issued = membership_invite(
            workspace=workspace, user=request.user, role=request.POST.get("role", ""), valid_days=valid_days,
            note=request.POST.get("note", ""),
        )
    except PermissionDenied as exc:
        return render(request, "kernellab/members/list.html", _members_context(request, workspace, error=str(exc)), status=403)
    except ServiceError as exc:
        return _render_members(request, workspace, status=400, error=str(exc))
    link = request.build_absolute_uri(reverse("invitation", args=[issued.token]))
    return _render_members(
        request, workspace, invitation_link=link,
        notice=f"Invitation created: whoever opens the link below joins as {issued.invitation.role} until "
               f"{issued.invitation.expires_at:%Y-%m-%d %H:%M} UTC. It works once and is shown only now; copy it.",
    )


@login_required
@require_POST
def member_change_role(request, slug: str, membership_id: int):
    workspace = workspace_for(request, slug)
    membership = _membership(workspace, membership_id)
    role = request.POST.get("role", "")
    return _perform(
        request, workspace,
        lambda: membership_change_role(membership=membership, user=request.user, role=role),
        notice=lambda result: f"{result.user.username} is now {result.role}.{_withdrawn(result.withdrawn_invitations)}",
    )


@login_required
@require_POST
def member_remove(request, slug: str, membership_id: int):
    workspace = workspace_for(request, slug)
    membership = _membership(workspace, membership_id)
    username = membership.user.get_username()
    return _perform(
        request, workspace,
        lambda: membership_remove(membership=membership, user=request.user),
        notice=lambda withdrawn: f"{username} was removed from {workspace.name}.{_withdrawn(withdrawn)}",
    )


@login_required
@require_POST
def invitation_withdraw(request, slug: str, invitation_id: int):
    workspace = workspace_for(request, slug)
    invitation = get_object_or_404(Invitation.objects.select_related("workspace"), pk=invitation_id, workspace=workspace)
    return _perform(
        request, workspace,
        lambda: invitation_revoke(invitation=invitation, user=request.user),
        notice="The invitation was withdrawn; its link no longer works.",
    )


def invitation_page(request, token: str):
    """Open to anyone holding the link: a logged-in person joins, someone new chooses a user name and password."""
    invitation = invitation_for_token(token=token)
    if invitation is None:
        raise Http404("This invitation link is not valid; check that it was copied whole, or ask an admin for a new one.")
    context = {"invitation": invitation, "workspace": invitation.workspace, "refusal": invitation_refusal(invitation),
               "error": None, "username": ""}
    if context["refusal"]:
        return render(request, "kernellab/members/invitation.html", context, status=410)
    if request.method != "POST":
        return render(request, "kernellab/members/invitation.html", context)
    try:
        if request.user.is_authenticated:
            invitation_accept(token=token, user=request.user)
        else:
            context["username"] = request.POST.get("username", "")
            if request.POST.get("password", "") != request.POST.get("password_again", ""):
                raise ServiceError("The two passwords differ; type the same password twice.")
            person = invitation_accept_new_user(
                token=token, username=context["username"], password=request.POST.get("password", "")
            )
            login(request, person, backend="django.contrib.auth.backends.ModelBackend")
    except ServiceError as exc:
        context["error"] = str(exc)
        return render(request, "kernellab/members/invitation.html", context, status=400)
    return redirect("workspace", slug=invitation.workspace.slug)
