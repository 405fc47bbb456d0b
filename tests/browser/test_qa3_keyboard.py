"""QA round 3: a keyboard reaches the comment box past the code in a few Tab presses (each line number of the
highlighted source was a tab stop), the line numbers still link to their lines, and the comment box is named."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_explorer import ONEHOT_6, open_explorer

pytestmark = pytest.mark.browser


def test_tab_goes_past_the_code_to_the_comment_box(server, feed, browser_as):
    run = feed("create_run", name="keyboard past the code")
    feed("add_node", run=run, key="t1", parent="n0", state="measured", speedup=1.2, bin=5, confidence=0.9, probabilities=ONEHOT_6)
    page = browser_as("engineer")
    open_explorer(page, server, run, node="t1")
    page.wait_for_selector("#node-panel .panel[data-node='t1']")
    lines = page.locator("#panel-code td.linenos a")
    assert lines.count() >= 4

    page.locator("#panel-code summary").focus()
    stops = []
    for _ in range(40):
        page.keyboard.press("Tab")
        stop = page.evaluate("() => { const e = document.activeElement;"
                             " return (e.closest('td.linenos') ? 'line number ' : '') + e.tagName + ' ' + (e.name || e.textContent.trim().slice(0, 30)); }")
        stops.append(stop)
        if stop == "TEXTAREA body":
            break
    assert stops[-1] == "TEXTAREA body", stops
    assert not [s for s in stops if s.startswith("line number")], stops
    assert len(stops) <= 12, stops
    # and the box it reaches says what it is for
    expect(page.locator(".comment-form textarea[name=body]")).to_have_accessible_name("Your comment on node t1")

    # a line number is still a link to its line
    third = lines.nth(2)
    href = third.get_attribute("href")
    third.click()
    assert page.url.endswith(href)
    assert page.locator(f"[id='{href[1:]}']").count() == 1
