"""The explorer once its session has ended elsewhere: the page goes to the login page (next= itself) instead of
retrying the tree for ever or sitting on a closed socket.

The tree request used to be a plain fetch: the server's login redirect was followed, the login page failed to parse
as JSON and the retry loop went on silently. It now asks as htmx asks and follows the HX-Redirect the server answers
a logged-out htmx request with (kernellab/views/htmx_login.py)."""
from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.world import PASSWORDS

pytestmark = pytest.mark.browser


def log_out_elsewhere(chromium, page, server) -> None:
    """Another tab of the same browser (the same session cookie) logs out: the session ends on the server."""
    other = chromium.new_context(storage_state=page.context.storage_state())
    try:
        tab = other.new_page()
        tab.goto(server.url + "/")
        tab.click("form.logout button")
        tab.wait_for_load_state("networkidle")
    finally:
        other.close()


def next_of(url: str) -> str:
    parts = urlsplit(url)
    assert parts.path == "/accounts/login/", url
    return parse_qs(parts.query)["next"][0]


def test_a_tree_being_retried_when_the_session_ends_goes_to_the_login_page(server, feed, chromium, browser_as):
    run = feed("create_run", name="retried after logout")
    page = browser_as("viewer")
    tree_requests = []
    state = {"fail": True}

    def busy_until_released(route):
        tree_requests.append(dict(route.request.headers))
        if state["fail"]:
            route.fulfill(status=503, body="busy")
        else:
            route.continue_()

    page.route("**/tree.json*", busy_until_released)
    page.goto(f"{server.url}/runs/{run}/?node=n0")
    expect(page.locator("#live-status")).to_contain_text("retrying")
    log_out_elsewhere(chromium, page, server)
    state["fail"] = False
    # The next retry (backoff of at most 4 s by then) is answered 401 + HX-Redirect: the page goes to the login page.
    page.wait_for_url("**/accounts/login/**", timeout=15000)
    assert next_of(page.url) == f"/runs/{run}/?node=n0"
    assert tree_requests and all(h.get("hx-request") == "true" for h in tree_requests)
    expect(page.locator("main")).to_contain_text("Your session ended; log in again to go on.")
    # Logging in there goes back to the explorer, which loads.
    page.fill("input[name=username]", "viewer")
    page.fill("input[name=password]", PASSWORDS["viewer"])
    page.click("button[type=submit]")
    page.wait_for_url(f"**/runs/{run}/?node=n0")
    page.wait_for_function("() => window.klExplorer && window.klExplorer.size >= 1", timeout=20000)


def test_a_live_explorer_whose_session_ends_goes_to_the_login_page(server, feed, chromium, browser_as):
    run = feed("create_run", name="live after logout")
    page = browser_as("viewer")
    page.goto(f"{server.url}/runs/{run}/")
    page.wait_for_function("() => window.klExplorer && window.klExplorer.connected", timeout=20000)
    log_out_elsewhere(chromium, page, server)
    # The socket notices at its next change (it asks again once its last answer is 3 s old) and closes; the page
    # then asks the tree, is told the session ended, and goes to the login page.
    deadline = time.monotonic() + 20
    i = 0
    while "/accounts/login/" not in page.url and time.monotonic() < deadline:
        i += 1
        feed("add_node", run=run, key=f"after-logout-{i}", parent="n0", bin=5, confidence=0.5)
        page.wait_for_timeout(1000)
    page.wait_for_url("**/accounts/login/**", timeout=5000)
    assert next_of(page.url) == f"/runs/{run}/"
