"""QA round 3, the browser experience, server side: a GPU verification is never approved by a post that also carries
a reason to reject; the panel's forms keep the reason with Reject alone; the panel's refusals come back as a 200 that
htmx shows; line numbers of highlighted code are out of the tab order; the comment box has a label; and a refusal
for want of a role names what the role allows in words, not by an action's code."""
import re

import pytest
from django.urls import reverse

from kernellab.models import ApprovalMode, NodeState
from kernellab.selectors.access import ACTION_ROLE
from kernellab.services import PermissionDenied
from kernellab.services.access import access_require
from kernellab.services.verifications import verification_request

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


@pytest.fixture
def pending(node, members):
    node.run.approval_mode = ApprovalMode.MANUAL
    node.run.save()
    return verification_request(node=node, user=members["engineer"])


def panel(client, node):
    return client.get(reverse("node-panel", args=[node.run_id, node.key]), HTTP_HX_REQUEST="true")


def post(client, name, node, data):
    return client.post(reverse(name, args=[node.run_id, node.key]), data, HTTP_HX_REQUEST="true")


# ---- 2. a reason to reject never comes with an approval ------------------------------------------------------------

def _forms(html: str) -> list[str]:
    return re.findall(r"<form\b.*?</form>", html, flags=re.S)


def test_in_the_panel_the_reason_to_reject_shares_its_form_with_reject_alone(client, members, node, pending):
    client.force_login(members["approver"])
    html = panel(client, node).content.decode()
    decide = [f for f in _forms(html) if reverse("node-decide", args=[node.run_id, node.key]) in f]
    with_reason = [f for f in decide if 'name="reason"' in f]
    assert len(with_reason) == 1
    # Enter in a text box submits its form with the form's first submit button: there, the only one is Reject.
    assert re.findall(r'<button[^>]*value="(\w+)"', with_reason[0]) == ["reject"]
    assert 'aria-label="Reason to reject"' in with_reason[0]
    approve = [f for f in decide if 'value="approve"' in f]
    assert len(approve) == 1
    assert all('type="hidden"' in field for field in re.findall(r"<input\b[^>]*>", approve[0]))  # nothing to type in


def test_in_the_queue_reject_is_the_first_button_of_the_form_with_the_reason(client, members, pending):
    client.force_login(members["approver"])
    html = client.get(reverse("verification-queue", args=["team"])).content.decode()
    form = next(f for f in _forms(html) if 'id="decide-form"' in f)
    assert re.findall(r'<button[^>]*value="(\w+)"', form)[0] == "reject"


def test_the_panel_refuses_an_approval_that_carries_a_reason_to_reject(client, members, node, pending):
    client.force_login(members["approver"])
    response = post(client, "node-decide", node, {"verification": pending.pk, "decision": "approve", "reason": "too slow"})
    assert response.status_code == 200
    body = response.content.decode()
    assert ("A reason to reject came with Approve, so nothing was decided: press Reject to reject, "
            "or empty the reason to approve.") in body
    assert "approved and queued" not in body
    pending.refresh_from_db()
    node.refresh_from_db()
    assert pending.state == "pending-approval" and node.state == NodeState.AWAITING_APPROVAL
    # a reason of spaces is no reason: the approval goes through
    post(client, "node-decide", node, {"verification": pending.pk, "decision": "approve", "reason": "  "})
    pending.refresh_from_db()
    assert pending.state == "queued"


def test_the_panel_rejects_with_the_reason(client, members, node, pending):
    client.force_login(members["approver"])
    body = post(client, "node-decide", node, {"verification": pending.pk, "decision": "reject", "reason": "too slow"}).content.decode()
    assert "GPU verification rejected." in body
    pending.refresh_from_db()
    assert pending.state == "rejected" and pending.reason == "too slow"


def test_the_queue_refuses_an_approval_that_carries_a_reason_for_a_rejection(client, members, pending):
    client.force_login(members["approver"])
    response = client.post(reverse("verification-decide", args=["team"]),
                           {"verification": [pending.pk], "decision": "approve", "reason": "wrong shape"}, follow=True)
    page = response.content.decode()
    assert ("A reason for a rejection came with Approve selected, so nothing was decided: press Reject selected to "
            "reject, or empty the reason to approve.") in page
    assert "approved." not in page
    pending.refresh_from_db()
    assert pending.state == "pending-approval"
    # the page answers in place, with the ticks and the reason as they were sent, so nothing must be selected again
    assert not response.redirect_chain
    assert re.search(rf'<input type="checkbox" name="verification" value="{pending.pk}"[^>]* checked>', page)
    assert re.search(r'<input name="reason"[^>]* value="wrong shape">', page)
    response = client.post(reverse("verification-decide", args=["team"]),
                           {"verification": [pending.pk], "decision": "reject", "reason": "wrong shape"}, follow=True)
    assert "1 verification rejected." in response.content.decode()
    pending.refresh_from_db()
    assert pending.state == "rejected" and pending.reason == "wrong shape"


# ---- 4. keyboard and labels -----------------------------------------------------------------------------------------

def test_line_numbers_of_the_panel_code_are_links_out_of_the_tab_order(client, members, node):
    from django.core.cache import cache

    cache.clear()
    client.force_login(members["viewer"])
    html = panel(client, node).content.decode()
    links = re.findall(r'<a\b[^>]*href="#n\d+--\d+"[^>]*>', html)
    assert len(links) == len(node.kernel.source.splitlines())
    assert all('tabindex="-1"' in link for link in links), links[:3]
    assert f'id="n{node.pk}--1"' in html  # each still lands on its line


def test_highlighted_code_elsewhere_keeps_its_line_numbers_out_of_the_tab_order():
    from kernellab.views.code import highlight_cuda, highlight_python, highlight_toml

    for html in (highlight_cuda("int a;\nint b;\n", anchor="src"), highlight_python("a = 1\n", anchor="ref"),
                 highlight_toml("a = 1\n", anchor="spec")):
        links = re.findall(r"<a\b[^>]*href=[^>]*>", str(html))
        assert links and all('tabindex="-1"' in link for link in links)
    # the source's own text is escaped: a link written in it stays text
    assert "&lt;a href=" in str(highlight_cuda('// <a href="#x">\n'))


def test_the_comment_box_and_the_reason_to_reject_have_labels(client, members, node, pending):
    client.force_login(members["approver"])
    html = panel(client, node).content.decode()
    box = re.search(r'<textarea name="body"[^>]*id="(\w+)"', html)
    assert box, html
    assert re.search(rf'<label for="{box.group(1)}">Your comment on node {node.key}</label>', html)
    # every other text box of the panel is named by its <label> or an aria-label
    for control in re.findall(r"<(?:input|textarea)\b(?![^>]*type=\"(?:hidden|checkbox)\")[^>]*>", html):
        if 'name="body"' in control:
            continue
        named = "aria-label=" in control or re.search(r"<label>[^<]*" + re.escape(control), html)
        assert named, control


# ---- 5. refusals in words -------------------------------------------------------------------------------------------

def test_every_action_has_a_phrase():
    from kernellab.services.access import ACTION_PHRASE

    assert set(ACTION_PHRASE) == set(ACTION_ROLE)


@pytest.mark.parametrize("action, role, sentence", [
    ("discover", "viewer", "You need the engineer role or above to mark discovery moments in Team; you are a viewer."),
    ("run", "viewer", "You need the engineer role or above to start, steer or add candidates to runs in Team; you are a viewer."),
    ("admin", "engineer", "You need the admin role or above to manage members and invitations in Team; you are an engineer."),
    ("approve", "engineer", "You need the approver role or above to approve or reject GPU verifications in Team; you are an engineer."),
    ("request-verification", "viewer", "You need the engineer role or above to request GPU verifications in Team; you are a viewer."),
    ("comment", "viewer", "You need the engineer role or above to comment on nodes in Team; you are a viewer."),
    ("upload", "viewer", "You need the engineer role or above to upload or change problems and datasets in Team; you are a viewer."),
])
def test_a_refusal_names_what_the_role_allows(workspace, members, action, role, sentence):
    with pytest.raises(PermissionDenied) as refused:
        access_require(user=members[role], workspace=workspace, action=action)
    assert str(refused.value) == sentence


def test_the_panel_the_run_controls_and_the_members_page_refuse_in_words(client, members, node):
    client.force_login(members["viewer"])
    body = post(client, "node-discovery", node, {"note": "mine"}).content.decode()
    assert "You need the engineer role or above to mark discovery moments in Team; you are a viewer." in body
    body = post(client, "node-child", node, {"source": node.kernel.source, "launch": ""}).content.decode()
    assert "You need the engineer role or above to start, steer or add candidates to runs in Team; you are a viewer." in body
    body = client.post(reverse("run-action", args=[node.run_id]), {"action": "start"}, HTTP_HX_REQUEST="true").content.decode()
    assert "You need the engineer role or above to start, steer or add candidates to runs in Team; you are a viewer." in body
    client.force_login(members["engineer"])
    body = client.post(reverse("member-add", args=["team"]), {"username": "viewer", "role": "engineer"}).content.decode()
    assert "You need the admin role or above to manage members and invitations in Team; you are an engineer." in body
