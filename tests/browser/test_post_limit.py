"""A form holding more text than the server reads from one post is not sent: the server would refuse it whole and
its answer would replace the form, and what was typed, with a page. The form stays, with both sizes named; the
same form, shortened, is sent."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_explorer import ONEHOT_6, open_explorer
from tests.browser.world import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.browser

TOO_MUCH = 3 * 1024 * 1024  # the limit is 2 MiB under the default 256 KiB text limit


def test_an_oversized_upload_form_is_kept_with_a_sentence(server, feed, browser_as):
    before = feed("counts")["problems"]
    page = browser_as("engineer")
    page.goto(f"{server.url}/w/team/problems/new")
    limit = int(page.locator("body").get_attribute("data-post-limit"))
    assert limit >= 2 * 1024 * 1024
    page.fill("textarea[name=spec_toml]", SIMPLE_SPEC.replace('name = "vector_scale"', 'name = "vector_scale_big"'))
    page.locator("textarea[name=reference_source]").evaluate("(el, n) => { el.value = '// padding\\n'.repeat(n); }",
                                                             TOO_MUCH // 11)
    page.click("button:has-text('Check and save')")
    notice = page.locator("[data-post-too-large]")
    expect(notice).to_contain_text("Not sent")
    expect(notice).to_contain_text(f"{-(-limit // 1024):,} KiB")
    assert page.url.endswith("/w/team/problems/new")
    assert len(page.locator("textarea[name=reference_source]").input_value()) == TOO_MUCH // 11 * 11
    assert feed("counts")["problems"] == before

    # (set, not typed: Chromium takes long to lay out three megabytes of text in a box, past fill's wait)
    page.locator("textarea[name=reference_source]").evaluate("(el, text) => { el.value = text; }", SIMPLE_REFERENCE)
    page.click("button:has-text('Check and save')")
    expect(page.locator("h1")).to_contain_text("Vector scale", timeout=60000)
    assert feed("counts")["problems"] == before + 1


def test_an_oversized_comment_is_not_sent_and_stays_in_its_box(server, feed, browser_as):
    run = feed("create_run", name="long comment run")
    feed("add_node", run=run, key="c1", parent="n0", state="measured", speedup=1.5, bin=5, confidence=0.9, probabilities=ONEHOT_6)
    page = browser_as("engineer")
    open_explorer(page, server, run, node="c1")
    page.wait_for_selector("#node-panel .panel[data-node='c1']")
    box = page.locator(".comment-form textarea[name=body]")
    box.evaluate("(el, n) => { el.value = 'é'.repeat(n); }", TOO_MUCH // 4)  # urlencoded: 6 bytes each
    page.click(".comment-form button")
    expect(page.locator(".comment-form [data-post-too-large]")).to_contain_text("Not sent")
    assert len(box.input_value()) == TOO_MUCH // 4
    box.fill("A short one.")
    page.click(".comment-form button")
    expect(page.locator("#panel-comments")).to_contain_text("A short one.")
    assert "A short one." in feed("counts")["comments"]
