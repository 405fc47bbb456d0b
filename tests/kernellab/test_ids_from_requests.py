"""QA bugs 1 and 2: an id typed into a form is parsed once (views.common.db_id), so a letter, a Unicode digit or a
number past the database's integer is refused in a sentence, never with an error page."""
import pytest
from django.urls import reverse

from kernellab.models import ApprovalMode, VerificationState
from kernellab.services.verifications import verification_request
from kernellab.views.common import DB_ID_MAX, db_id

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]

BAD_IDS = ["abc", "²", "٣", "1²", "99999999999999999999999", str(2**63), "-1", "+1", " 1", "1.0", "", "9" * 5000]


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr("kernellab.tasks.search_run_advance.apply_async", lambda *a, **k: None)
    monkeypatch.setattr("kernellab.tasks.verification_execute.apply_async", lambda *a, **k: None)


@pytest.fixture
def pending(node, members):
    node.run.approval_mode = ApprovalMode.MANUAL
    node.run.save()
    return verification_request(node=node, user=members["engineer"])


def test_a_database_id_is_ascii_digits_within_the_signed_64_bit_range():
    assert db_id("42") == 42 and db_id("0042") == 42 and db_id("0") == 0
    assert db_id(str(DB_ID_MAX)) == DB_ID_MAX == 2**63 - 1
    assert db_id("0" * 40 + "7") == 7
    for bad in BAD_IDS:
        assert db_id(bad) is None, bad
    assert db_id(None) is None and db_id(42) is None


@pytest.mark.parametrize("bad", ["abc", "²", "99999999999999999999999", ""])
def test_deciding_a_nodes_verification_with_a_bad_id_says_so_in_the_panel(client, members, pending, node, bad):
    client.force_login(members["engineer"])
    response = client.post(reverse("node-decide", args=[node.run_id, node.key]), {"verification": bad, "decision": "approve"},
                           HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "That verification is not one of this node&#x27;s." in response.content.decode()
    pending.refresh_from_db()
    assert pending.state == VerificationState.PENDING


@pytest.mark.parametrize("bad", ["²", "99999999999999999999999", str(2**63), "abc"])
def test_the_queue_ignores_a_bad_id_and_asks_for_a_selection(client, members, pending, bad):
    client.force_login(members["approver"])
    response = client.post("/w/team/verifications/decide", {"verification": [bad], "decision": "approve"}, follow=True)
    assert response.status_code == 200
    assert b"Select at least one verification first." in response.content
    pending.refresh_from_db()
    assert pending.state == VerificationState.PENDING


def test_the_queue_decides_the_good_ids_among_bad_ones(client, members, pending):
    client.force_login(members["approver"])
    response = client.post("/w/team/verifications/decide",
                           {"verification": ["²", str(pending.pk), "99999999999999999999999"], "decision": "approve"},
                           follow=True)
    assert b"1 verification approved" in response.content
    pending.refresh_from_db()
    assert pending.state == VerificationState.QUEUED
