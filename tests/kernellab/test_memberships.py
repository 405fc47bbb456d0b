"""Managing a team in the app: adding people, invitation links, role changes, removal, the last admin,
and what a viewer's pages offer."""
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from kernellab.models import Invitation, Membership, Role
from kernellab.services import PermissionDenied, ServiceError
from kernellab.services.memberships import (
    invitation_accept,
    invitation_accept_new_user,
    invitation_revoke,
    membership_add,
    membership_change_role,
    membership_invite,
    membership_remove,
)

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def newcomer(django_user_model):
    return django_user_model.objects.create_user(username="newcomer", password="pw-newcomer-123")


def membership_of(user, workspace):
    return Membership.objects.filter(user=user, workspace=workspace).first()


# Services


def test_an_admin_adds_an_existing_user_by_user_name(workspace, members, newcomer):
    membership = membership_add(workspace=workspace, user=members["admin"], username="NewComer", role="engineer")
    assert membership.user == newcomer and membership.role == Role.ENGINEER


def test_adding_an_unknown_user_name_says_to_invite_instead(workspace, members):
    with pytest.raises(ServiceError, match="No one has the user name 'ghost'; create an invitation link"):
        membership_add(workspace=workspace, user=members["admin"], username="ghost", role="viewer")


def test_adding_someone_already_in_the_workspace_is_refused_and_keeps_their_role(workspace, members):
    with pytest.raises(ServiceError, match="engineer is already a member of Team as engineer"):
        membership_add(workspace=workspace, user=members["admin"], username="engineer", role="admin")
    assert membership_of(members["engineer"], workspace).role == Role.ENGINEER


def test_an_unknown_role_is_refused_with_the_roles_there_are(workspace, members, newcomer):
    with pytest.raises(ServiceError, match="'owner' is not a role; choose viewer, engineer, approver or admin"):
        membership_add(workspace=workspace, user=members["admin"], username="newcomer", role="owner")
    assert membership_of(newcomer, workspace) is None


@pytest.mark.parametrize("role", ["viewer", "engineer", "approver", "outsider"])
def test_only_admins_add_invite_change_roles_or_remove(workspace, members, newcomer, role):
    actor = members[role]
    with pytest.raises(PermissionDenied):
        membership_add(workspace=workspace, user=actor, username="newcomer", role="admin")
    with pytest.raises(PermissionDenied):
        membership_invite(workspace=workspace, user=actor, role="admin")
    with pytest.raises(PermissionDenied):
        membership_change_role(membership=membership_of(members["viewer"], workspace), user=actor, role="admin")
    with pytest.raises(PermissionDenied):
        membership_remove(membership=membership_of(members["viewer"], workspace), user=actor)
    assert membership_of(newcomer, workspace) is None
    assert membership_of(members["viewer"], workspace).role == Role.VIEWER
    assert not Invitation.objects.exists()


def test_an_invitation_stores_only_a_hash_of_its_token(workspace, members):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer", valid_days=7)
    stored = Invitation.objects.get()
    assert len(issued.token) >= 40
    assert issued.token not in stored.token_hash
    assert timedelta(days=6, hours=23) < stored.expires_at - timezone.now() <= timedelta(days=7)


def test_an_invitation_is_valid_for_one_seven_or_thirty_days_only(workspace, members):
    with pytest.raises(ServiceError, match="valid for 1, 7, 30 days, not 365"):
        membership_invite(workspace=workspace, user=members["admin"], role="viewer", valid_days=365)


def test_a_logged_in_user_accepts_an_invitation_and_joins_with_its_role(workspace, members, newcomer):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="approver")
    membership = invitation_accept(token=issued.token, user=newcomer)
    assert membership.role == Role.APPROVER and membership.workspace == workspace
    invitation = Invitation.objects.get()
    assert invitation.accepted_by == newcomer and invitation.accepted_at is not None


def test_an_invitation_works_only_once(workspace, members, newcomer, django_user_model):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    invitation_accept(token=issued.token, user=newcomer)
    second = django_user_model.objects.create_user(username="second", password="pw-second-123")
    with pytest.raises(ServiceError, match="has already been used"):
        invitation_accept(token=issued.token, user=second)
    assert membership_of(second, workspace) is None


def test_an_expired_invitation_is_refused(workspace, members, newcomer):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    Invitation.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    with pytest.raises(ServiceError, match="expired on"):
        invitation_accept(token=issued.token, user=newcomer)
    assert membership_of(newcomer, workspace) is None


def test_a_withdrawn_invitation_is_refused(workspace, members, newcomer):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    invitation_revoke(invitation=issued.invitation, user=members["admin"])
    with pytest.raises(ServiceError, match="was withdrawn"):
        invitation_accept(token=issued.token, user=newcomer)
    assert membership_of(newcomer, workspace) is None


def test_a_link_used_by_someone_else_between_the_check_and_the_join_is_refused(workspace, members, newcomer, monkeypatch):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    Invitation.objects.update(accepted_at=timezone.now())
    # The check read the invitation just before the other person's acceptance was committed.
    monkeypatch.setattr("kernellab.services.memberships.invitation_refusal", lambda invitation, now=None: None)
    with pytest.raises(ServiceError, match="was used a moment ago by someone else"):
        invitation_accept(token=issued.token, user=newcomer)
    assert membership_of(newcomer, workspace) is None


def test_a_made_up_token_is_refused(workspace, members, newcomer):
    with pytest.raises(ServiceError, match="not valid"):
        invitation_accept(token="made-up", user=newcomer)


def test_a_member_accepting_an_invitation_keeps_their_role_and_leaves_the_link_unused(workspace, members):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="admin")
    with pytest.raises(ServiceError, match="already a member of Team as viewer"):
        invitation_accept(token=issued.token, user=members["viewer"])
    assert membership_of(members["viewer"], workspace).role == Role.VIEWER
    assert Invitation.objects.get().accepted_at is None


def test_someone_new_chooses_a_user_name_and_password_and_joins(workspace, members):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    person = invitation_accept_new_user(token=issued.token, username="fresh", password="a-long-password")
    assert person.check_password("a-long-password")
    assert membership_of(person, workspace).role == Role.ENGINEER


def test_a_new_account_with_a_taken_name_or_short_password_is_not_created(workspace, members, django_user_model):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    with pytest.raises(ServiceError, match="The user name 'Viewer' is taken"):
        invitation_accept_new_user(token=issued.token, username="Viewer", password="a-long-password")
    with pytest.raises(ServiceError, match="too short"):
        invitation_accept_new_user(token=issued.token, username="fresh", password="short")
    assert not django_user_model.objects.filter(username="fresh").exists()
    assert Invitation.objects.get().accepted_at is None


def test_no_account_is_created_from_an_expired_invitation(workspace, members, django_user_model):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="engineer")
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(ServiceError, match="expired"):
        invitation_accept_new_user(token=issued.token, username="fresh", password="a-long-password")
    assert not django_user_model.objects.filter(username="fresh").exists()


def test_an_admin_changes_a_members_role(workspace, members):
    membership = membership_change_role(membership=membership_of(members["viewer"], workspace), user=members["admin"], role="approver")
    assert membership.role == Role.APPROVER
    assert membership_of(members["viewer"], workspace).role == Role.APPROVER


def test_the_last_admin_cannot_be_demoted_and_is_told_why(workspace, members):
    with pytest.raises(ServiceError, match="admin is the last admin of Team and cannot be made engineer: it needs at least one admin"):
        membership_change_role(membership=membership_of(members["admin"], workspace), user=members["admin"], role="engineer")
    assert membership_of(members["admin"], workspace).role == Role.ADMIN


def test_the_last_admin_cannot_be_removed(workspace, members):
    with pytest.raises(ServiceError, match="last admin of Team and cannot be removed"):
        membership_remove(membership=membership_of(members["admin"], workspace), user=members["admin"])
    assert membership_of(members["admin"], workspace) is not None


def test_an_admin_steps_down_once_there_is_another_admin(workspace, members):
    membership_change_role(membership=membership_of(members["approver"], workspace), user=members["admin"], role="admin")
    membership_change_role(membership=membership_of(members["admin"], workspace), user=members["admin"], role="viewer")
    assert membership_of(members["admin"], workspace).role == Role.VIEWER


def test_an_admin_removes_a_member(workspace, members):
    membership_remove(membership=membership_of(members["engineer"], workspace), user=members["admin"])
    assert membership_of(members["engineer"], workspace) is None


def test_a_removed_admin_can_no_longer_manage_members(workspace, members):
    membership_change_role(membership=membership_of(members["approver"], workspace), user=members["admin"], role="admin")
    membership_remove(membership=membership_of(members["admin"], workspace), user=members["approver"])
    with pytest.raises(PermissionDenied, match="not a member"):
        membership_remove(membership=membership_of(members["viewer"], workspace), user=members["admin"])


# Pages


def login(client, user):
    client.force_login(user)
    return client


def test_every_member_sees_the_members_and_their_roles(client, members):
    body = login(client, members["viewer"]).get(reverse("member-list", args=["team"])).content.decode()
    for role in ("viewer", "engineer", "approver", "admin"):
        assert f'data-member="{role}"' in body
    assert "Change role" not in body and "Create invitation link" not in body and "Remove" not in body


def test_an_outsider_gets_no_members_page(client, members):
    assert login(client, members["outsider"]).get(reverse("member-list", args=["team"])).status_code == 404


def test_the_navigation_and_the_workspace_page_link_to_the_members(client, members):
    body = login(client, members["viewer"]).get(reverse("workspace", args=["team"])).content.decode()
    assert body.count(reverse("member-list", args=["team"])) == 2
    assert "4 members" in body


def test_a_viewers_workspace_page_offers_no_upload(client, members):
    response = login(client, members["viewer"]).get("/", follow=True)
    body = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("workspace", args=["team"])
    assert reverse("problem-upload", args=["team"]) not in body
    assert "Upload a reference kernel" not in body


def test_an_engineers_workspace_page_offers_the_upload(client, members):
    body = login(client, members["engineer"]).get(reverse("workspace", args=["team"])).content.decode()
    assert reverse("problem-upload", args=["team"]) in body


def test_a_viewer_sees_no_run_or_node_actions(client, members, node):
    client = login(client, members["viewer"])
    problem_page = client.get(reverse("problem-detail", args=[node.run.problem_id])).content.decode()
    assert reverse("run-new", args=[node.run.problem_id]) not in problem_page
    explorer = client.get(reverse("run-explorer", args=[node.run_id])).content.decode()
    assert 'name="action" value="start"' not in explorer
    panel = client.get(reverse("node-panel", args=[node.run_id, node.key]), **HTMX).content.decode()
    for action in ("Comment</button>", "Mark as a discovery moment", "Request GPU verification", "Add as a child"):
        assert action not in panel


def test_an_admin_adds_a_member_through_the_page(client, members, newcomer, workspace):
    response = login(client, members["admin"]).post(
        reverse("member-add", args=["team"]), {"username": "newcomer", "role": "engineer"}, **HTMX
    )
    assert response.status_code == 200
    assert "newcomer joined as engineer." in response.content.decode()
    assert membership_of(newcomer, workspace).role == Role.ENGINEER


def test_a_refused_change_shows_its_sentence_in_the_panel(client, members, workspace):
    admin = membership_of(members["admin"], workspace)
    response = login(client, members["admin"]).post(reverse("member-role", args=["team", admin.pk]), {"role": "viewer"}, **HTMX)
    body = response.content.decode()
    assert response.status_code == 200 and 'id="members-panel"' in body
    assert "is the last admin of Team and cannot be made viewer" in body
    full_page = client.post(reverse("member-remove", args=["team", admin.pk]))
    assert full_page.status_code == 400 and "cannot be removed" in full_page.content.decode()


@pytest.mark.parametrize("role", ["viewer", "engineer", "approver"])
def test_non_admin_members_are_refused_with_403(client, members, workspace, role):
    target = membership_of(members["viewer"], workspace)
    client = login(client, members[role])
    assert client.post(reverse("member-add", args=["team"]), {"username": "outsider", "role": "admin"}).status_code == 403
    assert client.post(reverse("member-invite", args=["team"]), {"role": "admin", "valid_days": "7"}).status_code == 403
    assert client.post(reverse("member-role", args=["team", target.pk]), {"role": "admin"}).status_code == 403
    assert client.post(reverse("member-remove", args=["team", target.pk])).status_code == 403
    assert membership_of(members["outsider"], workspace) is None and target.role == Role.VIEWER
    assert not Invitation.objects.exists()


def test_outsiders_cannot_post_to_the_members_forms(client, members, workspace):
    target = membership_of(members["viewer"], workspace)
    response = login(client, members["outsider"]).post(reverse("member-remove", args=["team", target.pk]))
    assert response.status_code == 404
    assert membership_of(members["viewer"], workspace) is not None


def test_the_members_forms_need_the_csrf_token(members, workspace):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(members["admin"])
    target = membership_of(members["viewer"], workspace)
    assert client.post(reverse("member-remove", args=["team", target.pk])).status_code == 403
    assert membership_of(members["viewer"], workspace) is not None


def test_a_membership_of_another_workspace_cannot_be_changed_through_this_one(client, members, django_user_model):
    from kernellab.models import Workspace

    other = Workspace.objects.create(name="Other", slug="other")
    stranger = Membership.objects.create(workspace=other, user=django_user_model.objects.create_user(username="s"), role="viewer")
    response = login(client, members["admin"]).post(reverse("member-remove", args=["team", stranger.pk]))
    assert response.status_code == 404
    assert Membership.objects.filter(pk=stranger.pk).exists()


def test_an_admin_creates_an_invitation_link_and_a_new_person_joins_through_it(client, members, workspace):
    response = login(client, members["admin"]).post(
        reverse("member-invite", args=["team"]), {"role": "engineer", "valid_days": "1", "note": "Ada"}, **HTMX
    )
    body = response.content.decode()
    assert "whoever opens the link below joins as engineer" in body
    link = body.split('id="invitation-link" readonly value="')[1].split('"')[0]
    assert link.startswith("http://testserver/invitations/")
    path = link.removeprefix("http://testserver")
    assert "Ada" in client.get(reverse("member-list", args=["team"])).content.decode()

    client.logout()
    page = client.get(path)
    assert page.status_code == 200 and "as <strong>engineer</strong>" in page.content.decode()
    mismatch = client.post(path, {"username": "ada", "password": "a-long-password", "password_again": "another-password"})
    assert mismatch.status_code == 400 and "The two passwords differ" in mismatch.content.decode()
    joined = client.post(path, {"username": "ada", "password": "a-long-password", "password_again": "a-long-password"})
    assert joined.status_code == 302 and joined["Location"] == reverse("workspace", args=["team"])
    assert client.get(reverse("workspace", args=["team"])).status_code == 200  # logged in as ada
    assert Membership.objects.get(workspace=workspace, user__username="ada").role == Role.ENGINEER
    client.logout()
    used = client.get(path)
    assert used.status_code == 410 and "already been used" in used.content.decode()


def test_a_logged_in_user_joins_with_one_click(client, members, newcomer, workspace):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="viewer")
    client = login(client, newcomer)
    path = reverse("invitation", args=[issued.token])
    assert "Join Team as newcomer" in client.get(path).content.decode()
    assert client.post(path).status_code == 302
    assert membership_of(newcomer, workspace).role == Role.VIEWER


def test_an_unknown_invitation_link_is_not_found(client, db):
    assert client.get(reverse("invitation", args=["no-such-token"])).status_code == 404


def test_an_admin_withdraws_an_open_invitation(client, members, workspace):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="viewer", note="Bob")
    response = login(client, members["admin"]).post(reverse("invitation-withdraw", args=["team", issued.invitation.pk]), **HTMX)
    assert "its link no longer works" in response.content.decode()
    client.logout()
    assert client.get(reverse("invitation", args=[issued.token])).status_code == 410


# An invitation lives only as long as its creator may grant it


def second_admin(workspace, members):
    """The approver made an admin, as the admin who will lose that right."""
    membership_change_role(membership=membership_of(members["approver"], workspace), user=members["admin"], role="admin")
    return members["approver"]


def test_a_removed_admin_cannot_rejoin_with_an_invitation_they_created(client, workspace, members):
    rogue = second_admin(workspace, members)
    own = membership_invite(workspace=workspace, user=rogue, role="admin", valid_days=30)
    others = membership_invite(workspace=workspace, user=members["admin"], role="viewer")
    membership_remove(membership=membership_of(rogue, workspace), user=members["admin"])
    assert login(client, rogue).get(reverse("workspace", args=["team"])).status_code == 404
    page = client.get(reverse("invitation", args=[own.token]))
    assert page.status_code == 410 and "was withdrawn" in page.content.decode()
    assert client.post(reverse("invitation", args=[own.token])).status_code == 410
    with pytest.raises(ServiceError, match="was withdrawn"):
        invitation_accept(token=own.token, user=rogue)
    assert membership_of(rogue, workspace) is None
    others.invitation.refresh_from_db()
    assert others.invitation.revoked_at is None  # another admin's links still work


def test_removal_leaves_used_and_expired_invitations_as_they_were(workspace, members, newcomer):
    rogue = second_admin(workspace, members)
    used = membership_invite(workspace=workspace, user=rogue, role="viewer")
    invitation_accept(token=used.token, user=newcomer)
    expired = membership_invite(workspace=workspace, user=rogue, role="viewer")
    Invitation.objects.filter(pk=expired.invitation.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    membership_remove(membership=membership_of(rogue, workspace), user=members["admin"])
    assert not Invitation.objects.filter(revoked_at__isnull=False).exists()
    assert membership_of(newcomer, workspace).role == Role.VIEWER


def test_a_demoted_admin_loses_every_open_invitation_they_created(workspace, members, newcomer):
    rogue = second_admin(workspace, members)
    as_admin = membership_invite(workspace=workspace, user=rogue, role="admin", valid_days=30)
    as_viewer = membership_invite(workspace=workspace, user=rogue, role="viewer")
    membership = membership_change_role(membership=membership_of(rogue, workspace), user=members["admin"], role="engineer")
    assert membership.withdrawn_invitations == 2
    # A viewer link too: only an admin may create or withdraw links, so none outlives its creator's admin role.
    for issued in (as_admin, as_viewer):
        with pytest.raises(ServiceError, match="was withdrawn"):
            invitation_accept(token=issued.token, user=newcomer)
    assert membership_of(newcomer, workspace) is None


def test_a_role_change_between_other_roles_withdraws_nothing(workspace, members):
    issued = membership_invite(workspace=workspace, user=members["admin"], role="viewer")
    membership = membership_change_role(membership=membership_of(members["viewer"], workspace), user=members["admin"], role="approver")
    assert membership.withdrawn_invitations == 0
    issued.invitation.refresh_from_db()
    assert issued.invitation.revoked_at is None


@pytest.mark.parametrize("lost", ["demoted", "removed", "deactivated", "deleted"])
def test_acceptance_checks_again_that_the_creator_may_still_grant_the_role(client, workspace, members, newcomer, django_user_model, lost):
    # Defence in depth: the creator lost the right by a way that withdrew nothing (a change made
    # outside the services, an account deleted or deactivated by an operator).
    rogue = second_admin(workspace, members)
    issued = membership_invite(workspace=workspace, user=rogue, role="admin", valid_days=30)
    if lost == "demoted":
        Membership.objects.filter(user=rogue, workspace=workspace).update(role=Role.ENGINEER)
    elif lost == "removed":
        Membership.objects.filter(user=rogue, workspace=workspace).delete()
    elif lost == "deactivated":
        django_user_model.objects.filter(pk=rogue.pk).update(is_active=False)
    else:
        rogue.delete()
    sentence = "can no longer add people to Team"
    with pytest.raises(ServiceError, match=sentence):
        invitation_accept(token=issued.token, user=newcomer)
    with pytest.raises(ServiceError, match=sentence):
        invitation_accept_new_user(token=issued.token, username="fresh", password="a-long-password")
    assert membership_of(newcomer, workspace) is None
    assert not django_user_model.objects.filter(username="fresh").exists()
    page = client.get(reverse("invitation", args=[issued.token]))
    assert page.status_code == 410 and sentence in page.content.decode()
    assert Invitation.objects.get().accepted_at is None


def test_the_page_says_which_invitations_a_removal_withdrew(client, workspace, members):
    rogue = second_admin(workspace, members)
    membership_invite(workspace=workspace, user=rogue, role="admin", valid_days=30)
    target = membership_of(rogue, workspace)
    body = login(client, members["admin"]).post(reverse("member-remove", args=["team", target.pk]), **HTMX).content.decode()
    assert "approver was removed from Team. The open invitation link they created was withdrawn." in body
    assert "No open invitations." in body


def test_the_page_says_which_invitations_a_demotion_withdrew(client, workspace, members):
    rogue = second_admin(workspace, members)
    membership_invite(workspace=workspace, user=rogue, role="admin", valid_days=30)
    membership_invite(workspace=workspace, user=rogue, role="viewer")
    target = membership_of(rogue, workspace)
    body = login(client, members["admin"]).post(reverse("member-role", args=["team", target.pk]), {"role": "viewer"}, **HTMX).content.decode()
    assert "approver is now viewer. The 2 open invitation links they created were withdrawn." in body


# Sentences on the members page


@pytest.mark.parametrize("days", ["abc", "", "7.5"])
def test_a_number_of_days_that_is_not_a_number_is_refused_with_a_sentence(client, members, days):
    response = login(client, members["admin"]).post(reverse("member-invite", args=["team"]), {"role": "viewer", "valid_days": days})
    body = response.content.decode()
    assert response.status_code == 400
    assert "Choose for how many days the link is valid: 1, 7 or 30." in body and "not 0" not in body
    assert not Invitation.objects.exists()


@pytest.mark.parametrize("role", ["", "  "])
def test_an_empty_role_is_asked_for(client, workspace, members, role):
    response = login(client, members["admin"]).post(reverse("member-invite", args=["team"]), {"role": role, "valid_days": "7"})
    body = response.content.decode()
    assert response.status_code == 400 and "Choose a role." in body
    assert "An empty role" not in body and "is not a role" not in body
    with pytest.raises(ServiceError, match=r"^Choose a role\.$"):
        membership_add(workspace=workspace, user=members["admin"], username="viewer", role=role)
