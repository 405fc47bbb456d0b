"""The explorer's view and panel, from QA's findings: Fit keeps the tree clear of the toolbar and the legend,
the tree can be walked with the keyboard, a missing ?node= says so, a discovery marked by someone else shows in an
open panel (and cannot be marked twice), the status badge follows the counters, the forecast chart's labels fit."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_explorer import ONEHOT_6, open_explorer, wait_for

pytestmark = pytest.mark.browser


def _overlaps(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


# What the canvas draws, in client pixels, from the explorer's handles: a node's disc (radius 5 world units) and
# a "+N" mark's pill (12 + 5 per digit wide, 11 high, centred at foldPosition).
DRAWN_BOXES = """() => {
  const k = klExplorer.transform.k, boxes = [];
  for (const key of klExplorer.keys()) {
    if (klExplorer.isFolded(key)) continue;
    const p = klExplorer.screenPosition(key);
    boxes.push({key, left: p.x - 5 * k, right: p.x + 5 * k, top: p.y - 5 * k, bottom: p.y + 5 * k});
  }
  for (const fold of klExplorer.folds()) {
    const p = klExplorer.foldPosition(fold.parent), w = (12 + 5 * String(fold.count).length) * k, h = 11 * k;
    boxes.push({key: fold.key, left: p.x - w / 2, right: p.x + w / 2, top: p.y - h / 2, bottom: p.y + h / 2});
  }
  const rect = el => { const r = document.querySelector(el).getBoundingClientRect();
                       return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {boxes, canvas: rect('#tree-canvas'), tools: rect('.tree-tools'), legend: rect('.legend')};
}"""


def _covered(page) -> list[str]:
    drawn = page.evaluate(DRAWN_BOXES)
    problems = []
    for box in drawn["boxes"]:
        for name in ("tools", "legend"):
            if _overlaps(box, drawn[name]):
                problems.append(f"{box['key']} under the {name}")
        c = drawn["canvas"]
        if box["left"] < c["left"] or box["right"] > c["right"] or box["top"] < c["top"] or box["bottom"] > c["bottom"]:
            problems.append(f"{box['key']} outside the canvas")
    return problems


def _tall_tree(feed, run: int, prefix: str) -> None:
    """A root with 30 folded forecasts and 7 measured children of 8 measured children each (a tree as tall as the
    pane allows), the last child with 16 folded forecasts of its own: "+N" marks at the very bottom."""
    nodes = [{"key": f"{prefix}f{i}", "parent": "n0", "bin": 5, "confidence": 0.4} for i in range(30)]
    for c in range(7):
        nodes.append({"key": f"{prefix}c{c}", "parent": "n0", "state": "measured", "speedup": 1.1 + c / 10})
        nodes += [{"key": f"{prefix}c{c}g{g}", "parent": f"{prefix}c{c}", "state": "measured", "speedup": 1.2} for g in range(8)]
    nodes += [{"key": f"{prefix}l{i}", "parent": f"{prefix}c6", "bin": 6, "confidence": 0.5} for i in range(16)]
    feed("add_nodes", run=run, nodes=nodes)


def test_fit_leaves_the_toolbar_and_the_legend_clear(server, feed, browser_as, artifacts):
    run = feed("create_run", name="fit run")
    _tall_tree(feed, run, "t")
    page = browser_as("viewer")
    page.set_viewport_size({"width": 1280, "height": 900})
    open_explorer(page, server, run)
    wait_for(page, "window.klExplorer.folds().length === 2 && window.klExplorer.firstShown('tc6g7') !== null")
    assert _covered(page) == []  # after a fresh load
    page.screenshot(path=str(artifacts / "explorer-fit.png"))

    page.evaluate("window.klExplorer.zoomAt(300, 300, 3)")
    page.click("button[data-tool=fit]")
    assert _covered(page) == []  # after Fit

    # During the run: the tree grows (a new measured child, more forecasts) and the view refits as it does.
    feed("add_nodes", run=run, nodes=[{"key": "tc7", "parent": "n0", "state": "measured", "speedup": 2.0}]
         + [{"key": f"tc7g{g}", "parent": "tc7", "state": "measured", "speedup": 2.1} for g in range(10)]
         + [{"key": f"tf{i}", "parent": "n0", "bin": 5, "confidence": 0.4} for i in range(30, 40)])
    wait_for(page, "window.klExplorer.firstShown('tc7g9') !== null && window.klExplorer.folds()[0].count === 40")
    page.wait_for_timeout(300)
    assert _covered(page) == []


def test_the_tree_can_be_walked_and_opened_with_the_keyboard(server, feed, browser_as):
    run = feed("create_run", name="keyboard run")
    nodes = [{"key": "k1", "parent": "n0", "state": "measured", "speedup": 1.5},
             {"key": "k2", "parent": "n0", "state": "measured", "speedup": 1.7},
             {"key": "k1a", "parent": "k1", "state": "measured", "speedup": 1.6}]
    nodes += [{"key": f"kf{i}", "parent": "k2", "bin": 6, "confidence": 0.4} for i in range(14)]
    feed("add_nodes", run=run, nodes=nodes)
    page = browser_as("viewer")
    open_explorer(page, server, run)
    wait_for(page, "window.klExplorer.size === 18 && window.klExplorer.folds().length === 1")
    page.focus("#node-find")
    for _ in range(10):  # the tree is reachable with Tab
        if page.evaluate("document.activeElement.id") == "tree-canvas":
            break
        page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.id") == "tree-canvas"

    def opened(key):
        page.wait_for_selector(f"#node-panel .panel[data-node='{key}']")
        wait_for(page, f"window.klExplorer.selected === {key!r}")

    page.keyboard.press("Enter")           # the root first
    opened("n0")
    page.keyboard.press("ArrowRight")      # its first child
    page.keyboard.press("Enter")
    opened("k1")
    page.keyboard.press("ArrowRight")      # k1's child
    page.keyboard.press(" ")
    opened("k1a")
    page.keyboard.press("ArrowLeft")       # back to k1, then its sibling
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    opened("k2")
    # k2's children are one "+14" mark: Enter on it shows them, and the first one opens with Enter.
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    wait_for(page, "window.klExplorer.folds().length === 0")
    page.keyboard.press("Enter")
    opened("kf0")
    # Shift+arrows still pan, and do not move the selection.
    before = page.evaluate("window.klExplorer.transform")
    page.keyboard.press("Shift+ArrowLeft")
    assert page.evaluate("window.klExplorer.transform")["x"] == before["x"] + 60
    assert page.evaluate("window.klExplorer.selected") == "kf0"
    expect(page.locator("#tree-keys")).to_contain_text("Enter opens")  # the keys are listed under the tree


def test_a_node_that_is_not_in_the_run_is_named_and_nothing_is_selected(server, feed, browser_as):
    run = feed("create_run", name="missing node run")
    feed("add_node", run=run, key="x1", parent="n0", bin=6, confidence=0.6, probabilities=ONEHOT_6)
    page = browser_as("viewer")
    open_explorer(page, server, run, node="99999")
    expect(page.locator("#node-panel")).to_contain_text("No node 99999 in this run.")
    wait_for(page, "window.klExplorer.size === 2")
    assert page.evaluate("window.klExplorer.selected") is None
    assert "node=" not in page.url
    # choosing a node afterwards works as usual
    page.evaluate("window.klExplorer.select('x1')")
    page.wait_for_selector("#node-panel .panel[data-node='x1']")
    expect(page.locator("#node-panel")).not_to_contain_text("No node 99999")


def test_a_discovery_marked_by_someone_else_shows_in_the_open_panel_and_is_not_marked_twice(server, feed, browser_as):
    run = feed("create_run", name="two people run")
    feed("add_node", run=run, key="w1", parent="n0", state="measured", speedup=2.6, bin=7, confidence=0.9, probabilities=ONEHOT_6)
    watcher = browser_as("engineer")
    open_explorer(watcher, server, run, node="w1")
    watcher.wait_for_selector("#node-panel .panel[data-node='w1']")
    watcher.click("#panel-discovery summary")
    expect(watcher.locator("#panel-discovery button:has-text('Mark as a discovery moment')")).to_be_visible()

    marker = browser_as("approver")
    open_explorer(marker, server, run, node="w1")
    marker.wait_for_selector("#node-panel .panel[data-node='w1']")
    marker.click("#panel-discovery summary")
    marker.fill("#panel-discovery textarea[name=note]", "the approver saw it first")
    marker.click("button:has-text('Mark as a discovery moment')")
    expect(marker.locator(".panel-notice")).to_contain_text("Marked as a discovery moment")

    # The watcher's tree, badge and discovery section all change without a reload.
    wait_for(watcher, "window.klExplorer.node('w1').discovery === true")
    expect(watcher.locator("#panel-live .tag.gold")).to_have_text("discovery")
    expect(watcher.locator("#panel-discovery summary")).to_contain_text("★")
    expect(watcher.locator("#panel-discovery")).to_contain_text("Marked by approver")
    expect(watcher.locator("#panel-discovery")).to_contain_text("the approver saw it first")
    expect(watcher.locator("#panel-discovery button:has-text('Mark as a discovery moment')")).to_have_count(0)
    assert watcher.evaluate("document.getElementById('panel-discovery').open")  # it stays open

    # A stale form posted anyway is refused with a sentence, and the one discovery stays the approver's.
    answer = watcher.evaluate(
        """async () => {
            const token = JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken'];
            const body = new URLSearchParams({action: 'mark', note: 'me too'});
            const r = await fetch(location.pathname + 'nodes/w1/discovery', {method: 'POST', body, headers: {'X-CSRFToken': token, 'HX-Request': 'true'}});
            return await r.text();
        }""")
    assert "This node is already marked as a discovery." in answer
    assert "the approver saw it first" in answer  # and the panel it answers with shows who marked it
    discoveries = feed("counts")["discoveries"]
    assert "the approver saw it first" in discoveries and "me too" not in discoveries


def test_a_waiting_run_with_nothing_queued_or_awaiting_says_it_is_between_steps(server, feed, browser_as):
    run = feed("create_run", name="between steps run", backend="cupy", approval_mode="manual")
    feed("worker_heartbeat", hostname="between@gpu", queues=["gpu.h200"])
    feed("run_transition", run=run, action="start")
    page = browser_as("viewer")
    open_explorer(page, server, run)
    expect(page.locator("#run-status")).to_have_text("Running")
    feed("run_transition", run=run, action="wait")  # the search waits; its step's measurements are all done
    expect(page.locator("#run-status")).to_have_text("Between steps")
    expect(page.locator('[data-count="pending"]')).to_have_text("0")
    expect(page.locator('[data-count="gpu"]')).to_have_text("0")
    # Something to wait for: the badge says so again.
    feed("add_node", run=run, key="b1", parent="n0", bin=6, confidence=0.3, probabilities=ONEHOT_6)
    feed("request_verification", run=run, key="b1")
    expect(page.locator('[data-count="pending"]')).to_have_text("1")
    expect(page.locator("#run-status")).to_have_text("Waiting for measurements")
    feed("worker_forget", hostname="between@gpu")


@pytest.mark.parametrize("width", [1500, 1000])
def test_the_forecast_charts_labels_are_not_cut(server, feed, browser_as, width):
    run = feed("create_run", name=f"chart labels run {width}")
    feed("add_node", run=run, key="c1", parent="n0", state="measured", speedup=1.3, bin=6, confidence=0.8, probabilities=ONEHOT_6)
    page = browser_as("viewer")
    page.set_viewport_size({"width": width, "height": 950})
    open_explorer(page, server, run, node="c1")
    page.wait_for_selector("#node-panel .forecast-chart .xtick text")
    cut = page.evaluate("""() => {
      const chart = document.querySelector('#node-panel .forecast-chart .main-svg').getBoundingClientRect();
      return Array.from(document.querySelectorAll('#node-panel .forecast-chart .xtick text')).filter(t => {
        const r = t.getBoundingClientRect();
        return r.left < chart.left - 0.5 || r.right > chart.right + 0.5 || r.bottom > chart.bottom + 0.5;
      }).map(t => t.textContent);
    }""")
    assert cut == []
    assert page.locator("#node-panel .forecast-chart .xtick").count() == 8
