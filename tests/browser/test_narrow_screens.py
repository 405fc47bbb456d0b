"""Phones and narrow windows: the explorer's tree stacks above the node panel instead of shrinking to
nothing, pages fit the width (wide tables and code scroll inside their own box), the node panel
breaks long kernel names, and every page links a favicon that loads."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LONG_NAME = "ALGO=warp,BLOCK=1024,VEC=16,ITEMS=1,GRID=264"


def wait_for(page, expression: str, timeout: float = 15000):
    # as a function: a bare expression would be eval'ed in the page, which its Content-Security-Policy forbids
    page.wait_for_function(f"() => ({expression})", timeout=timeout)


@pytest.fixture(scope="module")
def narrow_run(feed):
    run = feed("create_run", name="narrow screens run")
    feed("add_node", run=run, key="n1", parent="n0", bin=6, confidence=0.8, name=LONG_NAME,
         probabilities=[0.0, 0.0, 0.0, 0.02, 0.08, 0.8, 0.1, 0.0], rationale=f"start point: {LONG_NAME}")
    feed("add_node", run=run, key="n2", parent="n0", bin=5, confidence=0.6)
    feed("add_node", run=run, key="n3", parent="n1", state="measured", speedup=1.4)
    return run


def open_explorer(page, server, run: int, node: str | None = None):
    page.goto(f"{server.url}/runs/{run}/" + (f"?node={node}" if node else ""))
    wait_for(page, "window.klExplorer && window.klExplorer.connected")
    if node:
        page.wait_for_selector(f"#node-panel .panel[data-node='{node}']")


def page_width(page) -> dict:
    return page.evaluate("() => ({scroll: document.documentElement.scrollWidth, viewport: window.innerWidth})")


def test_on_a_phone_the_tree_stacks_above_the_node_panel(server, narrow_run, browser_as, artifacts):
    page = browser_as("engineer")
    page.set_viewport_size(PHONE)
    open_explorer(page, server, narrow_run, node="n1")
    wait_for(page, "window.klExplorer.screenPosition('n1') !== null")
    tree = page.locator(".tree-pane").bounding_box()
    canvas = page.locator("#tree-canvas").bounding_box()
    panel = page.locator("#node-panel").bounding_box()
    page.screenshot(path=str(artifacts / "narrow-explorer.png"), full_page=True)
    assert tree["width"] >= 300 and tree["height"] >= 300, tree
    assert canvas["width"] >= 300 and canvas["height"] >= 300, canvas
    assert panel["y"] >= tree["y"] + tree["height"] - 1, (tree, panel)  # below the tree, not beside it
    assert panel["width"] >= 300, panel
    width = page_width(page)
    assert width["scroll"] <= width["viewport"] + 1, width


@pytest.mark.parametrize("viewport", [PHONE, {"width": 1280, "height": 900}], ids=["phone", "desktop"])
def test_the_node_panel_breaks_a_long_kernel_name(server, narrow_run, browser_as, viewport):
    page = browser_as("engineer")
    page.set_viewport_size(viewport)
    open_explorer(page, server, narrow_run, node="n1")
    heading = page.locator("#node-panel .panel-head h2")
    assert LONG_NAME in heading.inner_text()
    sizes = page.evaluate("""() => {
        const h = document.querySelector('#node-panel .panel-head h2'), p = document.getElementById('node-panel');
        return {heading: [h.scrollWidth, h.clientWidth], panel: [p.scrollWidth, p.clientWidth]};
    }""")
    assert sizes["heading"][0] <= sizes["heading"][1] + 1, sizes
    assert sizes["panel"][0] <= sizes["panel"][1] + 1, sizes


def test_pages_fit_a_phone_without_scrolling_sideways(server, narrow_run, browser_as, artifacts):
    page = browser_as("engineer")
    page.set_viewport_size(PHONE)
    workspace = server.world["workspace"]
    pages = {
        "workspace": f"/w/{workspace}/",
        "runs": f"/w/{workspace}/runs/",
        "problem": f"/problems/{server.world['problem']}/",
        "spec": "/docs/spec",
        "dashboard": f"/runs/{narrow_run}/dashboard/",
        "new-run": f"/problems/{server.world['problem']}/runs/new",
    }
    too_wide = {}
    for name, path in pages.items():
        page.goto(server.url + path)
        page.wait_for_load_state("networkidle")
        width = page_width(page)
        if width["scroll"] > width["viewport"] + 1:
            too_wide[name] = width["scroll"]
            page.screenshot(path=str(artifacts / f"narrow-too-wide-{name}.png"), full_page=True)
    assert not too_wide, f"pages wider than the {PHONE['width']} px screen: {too_wide}"
    # the header wraps instead of squeezing the navigation into a tall column
    page.goto(f"{server.url}/w/{workspace}/")
    assert page.locator("header.topbar").bounding_box()["height"] < 250


def test_every_page_links_a_favicon_that_loads(server, browser_as):
    page = browser_as("engineer")
    for path in ("/accounts/login/", f"/w/{server.world['workspace']}/"):
        page.goto(server.url + path)
        href = page.evaluate("() => { const l = document.querySelector('link[rel~=icon]'); return l && l.href; }")
        assert href, f"{path} links no favicon"
        response = page.request.get(href)
        assert response.status == 200, (href, response.status)
        assert response.headers["content-type"].startswith("image/"), response.headers["content-type"]
