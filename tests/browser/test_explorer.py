"""What a team sees in the browser: log in, upload, start a run, watch the tree grow, open a node,
approve, mark a discovery, comment; and what a viewer cannot do."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.world import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.browser

ONEHOT_6 = [0.0, 0.0, 0.0, 0.02, 0.08, 0.8, 0.1, 0.0]


def wait_for(page, expression: str, timeout: float = 15000):
    # as a function: a bare expression would be eval'ed in the page, which its Content-Security-Policy forbids
    page.wait_for_function(f"() => ({expression})", timeout=timeout)


def open_explorer(page, server, run: int, node: str | None = None):
    page.goto(f"{server.url}/runs/{run}/" + (f"?node={node}" if node else ""))
    wait_for(page, "window.klExplorer && window.klExplorer.connected")


def click_node(page, key: str):
    wait_for(page, f"window.klExplorer.screenPosition({key!r}) !== null")
    page.evaluate(f"window.klExplorer.select({key!r})")  # centre it on the canvas first
    page.wait_for_selector(f"#node-panel .panel[data-node='{key}']")
    position = page.evaluate(f"window.klExplorer.screenPosition({key!r})")
    page.mouse.click(position["x"], position["y"])
    wait_for(page, f"window.klExplorer.selected === {key!r}")
    page.wait_for_selector(f"#node-panel .panel[data-node='{key}']")


def test_a_member_logs_in_and_sees_the_workspace(server, browser_as):
    page = browser_as("engineer")
    expect(page.locator("h1")).to_contain_text("Team")
    expect(page.locator("nav")).to_contain_text("Problems")
    page.click("nav >> text=Problems")
    expect(page.locator("#problem-table")).to_contain_text("Vector scale")


def test_a_wrong_password_is_refused(server, chromium):
    context = chromium.new_context()
    page = context.new_page()
    page.goto(server.url + "/accounts/login/")
    page.fill("input[name=username]", "engineer")
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    expect(page.locator(".msg.error")).to_contain_text("did not match")
    context.close()


def test_a_broken_spec_is_refused_with_a_sentence_and_nothing_is_saved(server, feed, browser_as):
    before = feed("counts")
    page = browser_as("engineer")
    page.goto(f"{server.url}/w/team/problems/new")
    page.fill("textarea[name=spec_toml]", SIMPLE_SPEC.replace('name = "vector_scale"', 'name = "Vector Scale!"'))
    page.fill("textarea[name=reference_source]", SIMPLE_REFERENCE)
    page.click("button:has-text('Check and save')")
    expect(page.locator("#rejection")).to_contain_text("The problem spec is not valid")
    expect(page.locator("#rejection")).to_contain_text("Nothing was saved")
    after = feed("counts")
    assert (after["problems"], after["kernels"]) == (before["problems"], before["kernels"])


BROKEN_REFERENCE = SIMPLE_REFERENCE.replace("2.0f * x[i];", "2.0f * x[i] +;")


def test_an_engineer_uploads_a_kernel_and_a_broken_one(server, feed, browser_as, tmp_path, artifacts):
    page = browser_as("engineer")
    spec = tmp_path / "problem.toml"
    spec.write_text(SIMPLE_SPEC.replace('"vector_scale"', '"vector_scale_upload"'))
    source = tmp_path / "reference.cu"
    source.write_text(SIMPLE_REFERENCE)
    page.goto(f"{server.url}/w/team/problems/new")
    page.set_input_files("input[name=spec_file]", str(spec))
    page.set_input_files("input[name=reference_file]", str(source))
    page.click("button:has-text('Check and save')")
    expect(page.locator("h1")).to_contain_text("Vector scale", timeout=60000)
    expect(page.locator("#reference-source")).to_contain_text("blockIdx.x")
    expect(page.locator("#roofline")).to_contain_text("ms")
    page.screenshot(path=str(artifacts / "problem-page.png"), full_page=True)

    before = feed("counts")
    page.goto(f"{server.url}/w/team/problems/new")
    page.fill("textarea[name=spec_toml]", SIMPLE_SPEC.replace('"vector_scale"', '"vector_scale_broken"'))
    page.fill("textarea[name=reference_source]", BROKEN_REFERENCE)
    page.click("button:has-text('Check and save')")
    expect(page.locator("#rejection")).to_contain_text("does not compile", timeout=60000)
    expect(page.locator(".compile-errors")).to_contain_text("line 3")
    expect(page.locator(".code.marked .hll")).to_contain_text("2.0f * x[i] +;")
    page.screenshot(path=str(artifacts / "upload-compile-error.png"), full_page=True)
    assert feed("counts")["problems"] == before["problems"]


def test_an_uploaded_kernel_without_a_gpu_worker_cannot_start_a_run_that_burns_its_budget(server, feed, browser_as):
    page = browser_as("engineer")
    page.goto(f"{server.url}/problems/{server.world['problem']}/runs/new")
    expect(page.locator("#replay-label")).to_be_visible()
    expect(page.locator("#no-backend")).to_contain_text("No backend can measure Vector scale now")
    expect(page.locator("#backends-unavailable")).to_contain_text("replay is not offered: no recorded measurements for this problem.")
    expect(page.locator("#backends-unavailable")).to_contain_text("cupy is not offered: no GPU worker listening on gpu.h200 (never seen).")
    expect(page.locator("button:has-text('Create run')")).to_be_disabled()


def test_an_engineer_starts_a_run_with_the_default_settings(server, feed, browser_as):
    feed("worker_heartbeat", hostname="browser@gpu", queues=["gpu.h200"])
    page = browser_as("engineer")
    page.goto(f"{server.url}/problems/{server.world['problem']}/")
    page.click("text=Start a search run")
    # a kernel without knobs: the recipes, with the step settings measured on own kernels
    expect(page.locator("select[name=generator]")).to_have_value("recipes")
    expect(page.locator("input[name=compile_share_target]")).to_have_value("0.25")
    expect(page.locator("select[name=backend]")).to_have_value("cupy")  # the only kind a listening worker answers
    page.fill("input[name=name]", "browser run")
    page.click("button:has-text('Create run')")
    expect(page.locator("h1")).to_contain_text("browser run")
    run = feed("last_run")
    assert feed("run_status", run=run) == "running"
    expect(page.locator("#run-status")).to_have_text("Running")
    page.click("#run-controls button:has-text('Pause')")
    expect(page.locator("#run-status")).to_have_text("Paused")
    assert feed("run_status", run=run) == "paused"
    feed("worker_forget", hostname="browser@gpu")


def test_a_waiting_run_says_why_and_cancel_asks_first_and_leaves_nothing_queued(server, feed, browser_as):
    run = feed("create_run", name="waiting run", backend="cupy")
    feed("add_node", run=run, key="w1", parent="n0", bin=6, confidence=0.6, probabilities=ONEHOT_6)
    feed("add_node", run=run, key="w2", parent="n0", bin=6, confidence=0.6, probabilities=ONEHOT_6)
    feed("worker_heartbeat", hostname="waiting@gpu", queues=["gpu.h200"])
    feed("run_transition", run=run, action="start")
    feed("request_verification", run=run, key="w1")
    feed("request_verification", run=run, key="w2")
    feed("worker_forget", hostname="waiting@gpu")  # the GPU worker went away
    page = browser_as("engineer")
    open_explorer(page, server, run)
    expect(page.locator("#run-wait-reason")).to_have_text(
        "2 verifications queued, but no GPU worker listening on gpu.h200 (never seen).")
    dialogs = []
    page.once("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.click("#run-cancel")
    expect(page.locator("#run-status")).to_have_text("Running")
    assert dialogs and "queued GPU verifications are cancelled with it" in dialogs[0]
    assert feed("queued_verifications", run=run) == ["queued", "queued"]
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#run-cancel")
    expect(page.locator("#run-status")).to_have_text("Cancelled")
    assert feed("queued_verifications", run=run) == ["cancelled", "cancelled"]


def test_nodes_appear_and_change_state_live(server, feed, browser_as, artifacts):
    run = feed("create_run", name="live run")
    page = browser_as("viewer")
    open_explorer(page, server, run)
    assert page.evaluate("window.klExplorer.size") == 1
    # The reference is 1.00x by definition: nothing is measured and there is no best yet.
    expect(page.locator('[data-count="measured"]')).to_have_text("0")
    expect(page.locator('[data-count="best"]')).to_have_text("—")
    for i in range(1, 13):
        feed("add_node", run=run, key=f"c{i}", parent="n0" if i <= 4 else f"c{(i - 1) % 4 + 1}", bin=5 + i % 3,
             confidence=0.3 + 0.05 * i, probabilities=ONEHOT_6)
    wait_for(page, "window.klExplorer.size === 13")
    wait_for(page, "window.klExplorer.firstShown('c12') !== null")  # drawn, not only received
    expect(page.locator('[data-count="forecast"]')).to_have_text("12")
    feed("set_node", run=run, key="c6", state="measured", speedup=2.5)
    wait_for(page, "window.klExplorer.node('c6').state === 'measured'")
    expect(page.locator('[data-count="measured"]')).to_have_text("1")
    expect(page.locator('[data-count="best"]')).to_contain_text("2.50×")
    assert page.evaluate("window.klExplorer.bestPath()") == ["c6", "c2", "n0"]
    feed("set_node", run=run, key="c7", state="failed-compile")
    wait_for(page, "window.klExplorer.node('c7').state === 'failed-compile'")
    expect(page.locator('[data-count="failed"]')).to_have_text("1")
    page.screenshot(path=str(artifacts / "explorer-live.png"))


def test_the_page_catches_up_after_the_server_restarts(server, feed, browser_as):
    run = feed("create_run", name="reconnect run")
    page = browser_as("viewer")
    open_explorer(page, server, run)
    server.stop()
    wait_for(page, "!window.klExplorer.connected")
    expect(page.locator("#live-status")).to_contain_text("connection lost")
    for i in range(1, 6):
        feed("add_node", run=run, key=f"r{i}", parent="n0", bin=6, confidence=0.7, probabilities=ONEHOT_6)
    feed("set_node", run=run, key="r2", state="measured", speedup=1.7)
    server.start()
    wait_for(page, "window.klExplorer.size === 6 && window.klExplorer.node('r2').state === 'measured'", timeout=30000)
    expect(page.locator("#live-status")).to_have_text("live")
    assert page.evaluate("window.klExplorer.lastSeq") == feed("change_seq", run=run)


def test_a_node_shows_its_code_diff_forecast_and_notes(server, feed, browser_as, artifacts):
    run = feed("create_run", name="panel run")
    feed("add_node", run=run, key="p1", parent="n0", state="measured", speedup=1.9, bin=6, confidence=0.8, factor="0.5",
         probabilities=ONEHOT_6, reasoning="Halving the work **should** help:\n- fewer multiplies\n- same loads", rationale="scale the product by one half")
    feed("add_measurement", run=run, key="p1", speedup=1.9, notes=[
        {"expert": "memory", "severity": "medium", "finding": "Global loads are 32-bit.", "evidence": {"ld_32": 1}, "advice": "Use float4."}])
    page = browser_as("viewer")
    open_explorer(page, server, run)
    click_node(page, "p1")
    panel = page.locator("#node-panel")
    expect(panel.locator("#panel-code")).to_contain_text("0.5f /* p1 */")
    expect(panel.locator("#panel-diff")).to_contain_text("+    if (i < n) y[i] = 2.0f * x[i] * 0.5f /* p1 */;")
    expect(panel.locator(".reasoning")).to_contain_text("fewer multiplies")
    expect(panel.locator(".reasoning strong")).to_have_text("should")
    expect(panel.locator(".forecast-chart .main-svg").first).to_be_visible()
    expect(panel.locator(".expert-notes")).to_contain_text("Global loads are 32-bit.")
    expect(panel.locator("#panel-measurements")).to_contain_text("0.10526")  # 0.2 ms / 1.9
    expect(panel).to_contain_text("scale the product by one half")
    page.screenshot(path=str(artifacts / "explorer-node-panel.png"))
    panel.screenshot(path=str(artifacts / "node-panel.png"))


def test_an_approver_approves_and_watches_the_node_change(server, feed, browser_as):
    run = feed("create_run", name="approval run", approval_mode="manual")
    feed("add_node", run=run, key="a1", parent="n0", bin=6, confidence=0.35, probabilities=ONEHOT_6)
    feed("request_verification", run=run, key="a1")
    page = browser_as("approver")
    open_explorer(page, server, run)
    wait_for(page, "window.klExplorer.node('a1').state === 'awaiting-approval'")
    expect(page.locator('[data-count="pending"]')).to_have_text("1")
    click_node(page, "a1")
    page.click("button:has-text('Approve GPU verification')")
    expect(page.locator(".panel-notice")).to_contain_text("approved and queued")
    wait_for(page, "window.klExplorer.node('a1').state === 'queued'")
    assert feed("finish_verification", run=run, key="a1", speedup=2.2) == "done"
    wait_for(page, "window.klExplorer.node('a1').state === 'measured' && window.klExplorer.node('a1').speedup === 2.2")
    # The open panel refreshes its live part on its own.
    expect(page.locator("#panel-state")).to_have_attribute("data-state", "measured")
    expect(page.locator("#panel-measurements")).to_contain_text("Loads are already coalesced.")


def test_an_engineer_marks_a_discovery_and_comments(server, feed, browser_as):
    run = feed("create_run", name="discovery run")
    feed("add_node", run=run, key="d1", parent="n0", state="measured", speedup=3.1, bin=7, confidence=0.9, probabilities=ONEHOT_6)
    page = browser_as("engineer")
    open_explorer(page, server, run, node="d1")
    page.wait_for_selector("#node-panel .panel[data-node='d1']")
    page.click("#panel-discovery summary")
    page.fill("#panel-discovery textarea[name=note]", "one half of the work, three times the speed")
    page.click("button:has-text('Mark as a discovery moment')")
    expect(page.locator(".panel-notice")).to_contain_text("Marked as a discovery moment")
    wait_for(page, "window.klExplorer.node('d1').discovery === true")
    page.fill(".comment-form textarea[name=body]", "Check the energy too.")
    page.click(".comment-form button")
    expect(page.locator("#panel-comments")).to_contain_text("Check the energy too.")
    state = feed("counts")
    assert "Check the energy too." in state["comments"]
    assert "one half of the work, three times the speed" in state["discoveries"]
    page.goto(server.url + "/discoveries/")
    row = page.locator("tr", has_text="three times the speed")
    expect(row).to_contain_text("engineer")
    expect(row).to_contain_text("1.00× → 3.10× (3.10×)")


def test_a_viewer_cannot_approve(server, feed, browser_as):
    run = feed("create_run", name="viewer run", approval_mode="manual")
    feed("add_node", run=run, key="v1", parent="n0", bin=6, confidence=0.35, probabilities=ONEHOT_6)
    verification = feed("request_verification", run=run, key="v1")
    page = browser_as("viewer")
    open_explorer(page, server, run, node="v1")
    page.wait_for_selector("#node-panel .panel[data-node='v1']")
    expect(page.locator("#node-panel")).to_contain_text("An approver decides")
    expect(page.locator("button:has-text('Approve GPU verification')")).to_have_count(0)
    # Forcing the request by hand is refused by the service, with a sentence.
    response = page.evaluate(
        """async (verification) => {
            const token = JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken'];
            const body = new URLSearchParams({verification: String(verification), decision: 'approve'});
            const r = await fetch(location.pathname + 'nodes/v1/decide', {method: 'POST', body, headers: {'X-CSRFToken': token, 'HX-Request': 'true'}});
            return await r.text();
        }""",
        verification,
    )
    assert "You need the approver role or above to approve or reject GPU verifications in Team; you are a viewer." in response
    assert feed("node_state", run=run, key="v1")["state"] == "awaiting-approval"
    page.goto(f"{server.url}/w/team/verifications/")
    expect(page.locator("text=Only approvers can approve")).to_be_visible()


def test_the_verification_queue_shows_jobs_and_their_progress_live(server, feed, browser_as):
    run = feed("create_run", name="queue run", approval_mode="manual")
    feed("add_node", run=run, key="q1", parent="n0", bin=6, confidence=0.3, probabilities=ONEHOT_6)
    verification = feed("request_verification", run=run, key="q1")
    page = browser_as("approver")
    page.goto(f"{server.url}/w/team/verifications/")
    page.check(f"input[name=verification][value='{verification}']")
    page.click("button:has-text('Approve selected')")
    expect(page.locator(".msg.success")).to_contain_text("1 verification approved")
    row = page.locator(f"#active tr[data-verification='{verification}']")
    expect(row).to_have_attribute("data-state", "queued")
    assert feed("claim_verification", run=run, key="q1") == "running"
    feed("heartbeat_verification", run=run, key="q1", progress="timing 20/50")
    expect(row).to_have_attribute("data-state", "running", timeout=8000)
    expect(row.locator(".progress-cell")).to_contain_text("timing 20/50")
    expect(row.locator(".progress-bar > span")).to_have_attribute("style", "width: 40%;")
    feed("finish_verification", run=run, key="q1", speedup=1.3)
    expect(page.locator(f"#active tr[data-verification='{verification}']")).to_have_count(0, timeout=8000)


def test_the_dashboard_draws_its_charts_from_measured_forecasts(server, feed, browser_as, artifacts):
    run = feed("create_run", name="dashboard run")
    for i, (speedup, bin_) in enumerate([(1.2, 5), (1.6, 6), (0.6, 6), (2.4, 7)], start=1):
        probabilities = [0.0] * 8
        probabilities[bin_ - 1] = 0.7
        probabilities[bin_ % 8] = 0.3
        feed("add_node", run=run, key=f"m{i}", parent="n0", bin=bin_, confidence=0.7, probabilities=probabilities)
        feed("request_verification", run=run, key=f"m{i}")
        assert feed("finish_verification", run=run, key=f"m{i}", speedup=speedup) == "done"
    page = browser_as("viewer")
    page.goto(f"{server.url}/runs/{run}/dashboard/")
    expect(page.locator("#dashboard-summary")).to_contain_text("4 GPU measurements used")
    expect(page.locator("#dashboard-summary")).to_contain_text("bin accuracy 0.75")
    for chart in ("progress", "considered", "confusion", "scatter", "reliability", "risk", "energy"):
        expect(page.locator(f"#chart-{chart} .main-svg").first).to_be_visible()
    page.screenshot(path=str(artifacts / "dashboard.png"), full_page=True)
    # Every legend stands clear of the axis titles of its chart.
    layout = page.evaluate("""() => {
      const boxes = [], overlaps = [];
      for (const chart of document.querySelectorAll('.chart')) {
        const legend = chart.querySelector('g.legend');
        if (!legend) continue;
        const l = legend.getBoundingClientRect();
        boxes.push(chart.id);
        for (const title of chart.querySelectorAll('.xtitle, .ytitle, .y2title')) {
          const t = title.getBoundingClientRect();
          if (l.left < t.right && t.left < l.right && l.top < t.bottom && t.top < l.bottom) overlaps.push(chart.id + ': ' + title.textContent);
        }
      }
      return {legends: boxes, overlaps};
    }""")
    assert set(layout["legends"]) >= {"chart-considered", "chart-reliability", "chart-energy"}
    assert layout["overlaps"] == []


def test_an_empty_dashboard_explains_itself(server, feed, browser_as):
    run = feed("create_run", name="empty dashboard")
    page = browser_as("viewer")
    page.goto(f"{server.url}/runs/{run}/dashboard/")
    expect(page.locator("#chart-progress")).to_have_text("No GPU measurement has finished yet.")
    expect(page.locator("#chart-reliability")).to_have_text("No node has both a forecast and a measurement yet.")


def test_what_others_do_shows_up_without_a_reload(server, feed, browser_as):
    run = feed("create_run", name="together run", backend="cupy")
    feed("add_node", run=run, key="t1", parent="n0", bin=6, confidence=0.6, probabilities=ONEHOT_6)
    page = browser_as("viewer")
    open_explorer(page, server, run, node="t1")
    page.wait_for_selector("#node-panel .panel[data-node='t1']")
    expect(page.locator("#run-status")).to_have_text("Created")
    feed("worker_heartbeat", hostname="together@gpu", queues=["gpu.h200"])  # a run starts only if it can be measured
    feed("run_transition", run=run, action="start")
    feed("worker_forget", hostname="together@gpu")
    expect(page.locator("#run-status")).to_have_text("Running")
    feed("comment", run=run, key="t1", body="Looks memory bound to me.")
    expect(page.locator("#panel-comments")).to_contain_text("Looks memory bound to me.")
    expect(page.locator("#panel-comments")).to_contain_text("approver")


def test_a_wide_parent_folds_its_forecast_only_leaves_into_one_mark(server, feed, browser_as, artifacts):
    run = feed("create_run", name="screened run")
    leaves = [{"key": f"s{i}", "parent": "n0", "bin": 4 + i % 3, "confidence": 0.4} for i in range(20)]
    feed("add_nodes", run=run, nodes=leaves + [
        {"key": "m1", "parent": "n0", "state": "measured", "speedup": 1.8},
        {"key": "m1a", "parent": "m1", "bin": 6, "confidence": 0.5},
        {"key": "m1b", "parent": "m1", "state": "queued", "bin": 6, "confidence": 0.5}])
    page = browser_as("engineer")
    open_explorer(page, server, run)
    wait_for(page, "window.klExplorer.size === 24 && window.klExplorer.folds().length === 1")
    assert page.evaluate("window.klExplorer.folds()") == [{"parent": "n0", "count": 20, "key": "+n0"}]
    assert page.evaluate("window.klExplorer.isFolded('s3')") and not page.evaluate("window.klExplorer.isFolded('m1a')")
    assert "+20 children" in page.evaluate("window.klExplorer.describeFold('n0')")
    expect(page.locator('[data-count="forecast"]')).to_have_text("22")  # the counts are of every node
    page.screenshot(path=str(artifacts / "explorer-folded.png"))

    # A new forecast joins the mark; a folded leaf that goes to the GPU leaves it.
    feed("add_node", run=run, key="s20", parent="n0", bin=5, confidence=0.3, probabilities=ONEHOT_6)
    wait_for(page, "window.klExplorer.folds().length === 1 && window.klExplorer.folds()[0].count === 21")
    feed("set_node", run=run, key="s4", state="queued")
    wait_for(page, "!window.klExplorer.isFolded('s4') && window.klExplorer.folds()[0].count === 20")

    # Clicking the mark shows the leaves; "Show all" and "Fold" switch folding off and on.
    position = page.evaluate("window.klExplorer.foldPosition('n0')")
    page.mouse.click(position["x"], position["y"])
    wait_for(page, "window.klExplorer.folds().length === 0 && !window.klExplorer.isFolded('s3')")
    page.click("button[data-tool=fold]")
    expect(page.locator("button[data-tool=fold]")).to_have_text("Fold")
    page.click("button[data-tool=fold]")
    expect(page.locator("button[data-tool=fold]")).to_have_text("Show all")
    wait_for(page, "window.klExplorer.folds().length === 1")

    # Finding a folded node opens its group and its panel.
    page.fill("#node-find", "s7")
    page.press("#node-find", "Enter")
    page.wait_for_selector("#node-panel .panel[data-node='s7']")
    wait_for(page, "!window.klExplorer.isFolded('s7') && window.klExplorer.folds().length === 0")
