import pytest

from kernellab.models import ApprovalMode
from kernellab.services import PermissionDenied
from kernellab.services.comments import comment_create
from kernellab.services.discoveries import discovery_mark
from kernellab.services.runs import run_create
from kernellab.services.verifications import verification_approve, verification_request


@pytest.fixture
def pending(node, members):
    node.run.approval_mode = ApprovalMode.MANUAL
    node.run.save()
    return verification_request(node=node, user=members["engineer"])


@pytest.mark.parametrize("role", ["viewer", "engineer", "outsider"])
def test_only_approvers_approve(pending, members, role):
    with pytest.raises(PermissionDenied):
        verification_approve(verification=pending, user=members[role])
    pending.refresh_from_db()
    assert pending.state == "pending-approval"


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_approvers_and_admins_approve(pending, members, role):
    assert verification_approve(verification=pending, user=members[role]).state == "queued"


def test_a_viewer_cannot_comment_or_start_runs(node, members, problem):
    with pytest.raises(PermissionDenied, match="engineer role or above"):
        comment_create(node=node, author=members["viewer"], body="nice")
    with pytest.raises(PermissionDenied):
        run_create(problem=problem, user=members["viewer"], generator="transform")


def test_an_outsider_is_told_they_are_not_a_member(node, members):
    with pytest.raises(PermissionDenied, match="not a member"):
        discovery_mark(node=node, user=members["outsider"], note="mine")


def test_views_hide_other_workspaces(client, members, run):
    client.force_login(members["outsider"])
    assert client.get(f"/w/{run.problem.workspace.slug}/").status_code == 404
    client.force_login(members["viewer"])
    assert client.get(f"/w/{run.problem.workspace.slug}/").status_code == 200


def test_a_viewer_sees_the_queue_but_cannot_approve_through_it(client, pending, members):
    client.force_login(members["viewer"])
    page = client.get("/w/team/verifications/")
    assert b"Only approvers can approve" in page.content
    response = client.post("/w/team/verifications/decide", {"verification": [pending.pk], "decision": "approve"}, follow=True)
    assert b"You need the approver role or above to approve or reject GPU verifications in Team; you are a viewer." in response.content
    pending.refresh_from_db()
    assert pending.state == "pending-approval"


def test_an_approver_approves_many_at_once(client, pending, members, node, run):
    client.force_login(members["approver"])
    response = client.post("/w/team/verifications/decide", {"verification": [pending.pk], "decision": "approve"}, follow=True)
    assert b"1 verification approved" in response.content
    pending.refresh_from_db()
    assert pending.state == "queued"


def test_login_is_required(client):
    response = client.get("/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("role, article", [("viewer", "a"), ("engineer", "an")])
def test_a_refusal_names_the_role_with_the_right_article(pending, members, role, article):
    with pytest.raises(PermissionDenied, match=f"to approve or reject GPU verifications in Team; you are {article} {role}\\.$"):
        verification_approve(verification=pending, user=members[role])
