"""A real search on replayed measurements: start it from the page, watch the driver's nodes arrive."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from kernellab.services.problems import BUNDLED_DIR
from tests.browser.harness import CHROMIUM, CHROMIUM_ARGS, KernelLabServer, login
from tests.browser.world import PASSWORDS

RECORDS = sorted(BUNDLED_DIR.glob("*/records/*.jsonl.gz"))

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not RECORDS, reason="no recorded measurements are bundled yet (kernellab/problems/<name>/records/<gpu>.jsonl.gz), "
                                           "so a replay run has nothing to replay"),
]


@pytest.fixture(scope="module")
def searching_server():
    with KernelLabServer() as server:
        server.feeder("setup")
        server.problems = {p["name"]: p["pk"] for p in server.feeder("load_bundled")}
        server.start_worker(["search", "replay"])
        yield server


def test_a_replay_run_started_from_the_page_grows_live(searching_server):
    from playwright.sync_api import sync_playwright

    server = searching_server
    record = RECORDS[0]
    problem, gpu = record.parent.parent.name, record.name.split(".")[0]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 950})
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        login(page, server, "engineer", PASSWORDS["engineer"])
        page.goto(f"{server.url}/problems/{server.problems[problem]}/runs/new")
        expect(page.locator("select[name=backend]")).to_have_value("replay")
        page.fill("input[name=name]", "replay run")
        page.fill("input[name=target_gpu]", gpu)
        page.fill("input[name=gpu_budget]", "6")
        page.fill("input[name=max_steps]", "6")
        page.click("button:has-text('Create run')")
        expect(page.locator("h1")).to_contain_text("replay run")
        page.wait_for_function("window.klExplorer && window.klExplorer.size > 4", timeout=180000)
        page.wait_for_function("Number(document.querySelector('[data-count=measured]').textContent) >= 2", timeout=300000)
        best = page.evaluate("window.klExplorer.bestPath()")
        assert len(best) >= 1
        browser.close()
        assert not errors
