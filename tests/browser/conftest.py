"""Browser tests: Debian's Chromium driven by Playwright against a real daphne server."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser.harness import CHROMIUM, CHROMIUM_ARGS, KernelLabServer, login

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def pytest_collection_modifyitems(config, items):
    if os.path.exists(CHROMIUM):
        return
    skip = pytest.mark.skip(reason=f"Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def server():
    with KernelLabServer() as running:
        running.world = running.feeder("setup")
        yield running


@pytest.fixture(scope="session")
def feed(server):
    return server.feeder


@pytest.fixture(scope="session")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def browser_as(chromium, server):
    """browser_as("approver") -> a logged-in page of a fresh browser context."""
    contexts = []
    script_errors: list[str] = []

    def open_as(role: str):
        from tests.browser.world import PASSWORDS

        context = chromium.new_context(viewport={"width": 1500, "height": 950})
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: script_errors.append(f"{page.url}: {error}"))
        page.on("console", lambda message: script_errors.append(f"{page.url}: {message.text}")
                if "Content Security Policy" in message.text else None)
        page.set_default_timeout(15000)
        login(page, server, role, PASSWORDS[role])
        return page

    yield open_as
    for context in contexts:
        context.close()
    assert not script_errors, "uncaught script errors: " + "; ".join(script_errors)


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
