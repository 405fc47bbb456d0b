"""QA round 3: Enter in the reason to reject a GPU verification rejects it, in the node panel and in the workspace's
verification queue; it never approves (it did: the form's first button was Approve, and Enter submits with that)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_explorer import ONEHOT_6, open_explorer

pytestmark = pytest.mark.browser


def test_enter_in_the_panel_reason_rejects(server, feed, browser_as):
    run = feed("create_run", name="enter rejects in the panel", approval_mode="manual")
    feed("add_node", run=run, key="e1", parent="n0", bin=6, confidence=0.35, probabilities=ONEHOT_6)
    feed("request_verification", run=run, key="e1")
    page = browser_as("approver")
    open_explorer(page, server, run, node="e1")
    page.wait_for_selector("#node-panel .panel[data-node='e1']")
    reason = page.locator("#node-panel input[name=reason]")
    reason.fill("too slow, do not measure")
    reason.press("Enter")
    expect(page.locator(".panel-notice")).to_have_text("GPU verification rejected.")
    assert feed("node_state", run=run, key="e1")["state"] == "rejected"
    assert feed("queued_verifications", run=run) == ["rejected"]


def _queue_with_one_pending(server, feed, browser_as, key: str):
    run = feed("create_run", name=f"enter in the queue {key}", approval_mode="manual")
    feed("add_node", run=run, key=key, parent="n0", bin=6, confidence=0.35, probabilities=ONEHOT_6)
    verification = feed("request_verification", run=run, key=key)
    page = browser_as("approver")
    page.goto(f"{server.url}/w/team/verifications/")
    tick = page.locator(f"input[name=verification][value='{verification}']")
    tick.check()
    return run, page, tick


def test_enter_in_the_queue_reason_rejects(server, feed, browser_as):
    run, page, _ = _queue_with_one_pending(server, feed, browser_as, "e2")
    reason = page.get_by_label("Reason for a rejection")
    reason.fill("reject: wrong shape")
    reason.press("Enter")
    expect(page.locator(".msg.success")).to_have_text("1 verification rejected.")
    assert feed("queued_verifications", run=run) == ["rejected"]
    assert feed("node_state", run=run, key="e2")["state"] == "rejected"


def test_enter_on_a_tick_in_the_queue_decides_nothing(server, feed, browser_as):
    run, page, tick = _queue_with_one_pending(server, feed, browser_as, "e3")
    tick.press("Enter")
    page.locator("#select-all").press("Enter")
    page.wait_for_timeout(500)
    assert page.url.endswith("/w/team/verifications/")
    expect(page.locator(".messages")).to_have_count(0)
    expect(tick).to_be_checked()
    assert feed("queued_verifications", run=run) == ["pending-approval"]
