"""A newcomer uploads a spec with several mistakes, sees every one with its line, fixes them in the
form the page kept, and the problem is saved."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.world import SIMPLE_REFERENCE, SIMPLE_SPEC

pytestmark = pytest.mark.browser

GOOD_SPEC = SIMPLE_SPEC.replace('name = "vector_scale"', 'name = "vector_scale_fixed"')
BAD_SPEC = (GOOD_SPEC.replace('role = "scalar"', 'role = "constant"')
            .replace('block = [256]', 'block = []')
            .replace('args = ["x", "y", "n"]', 'args = ["x", "y"]'))


def line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if fragment in line)


def test_a_bad_spec_shows_every_mistake_with_its_line_and_is_fixed_in_the_kept_form(server, feed, browser_as, tmp_path,
                                                                                     artifacts):
    before = feed("counts")
    page = browser_as("engineer")
    page.goto(f"{server.url}/w/team/problems/new")
    expect(page.locator("#spec-reference-link")).to_have_attribute("href", "/docs/spec")
    expect(page.locator("#role-temp")).to_contain_text("float* partials")
    spec_file = tmp_path / "problem.toml"
    spec_file.write_text(BAD_SPEC)
    page.set_input_files("input[name=spec_file]", str(spec_file))
    page.fill("textarea[name=reference_source]", SIMPLE_REFERENCE)
    page.click("button:has-text('Check and save')")

    expect(page.locator("#rejection")).to_contain_text("The problem spec has 3 mistakes")
    errors = page.locator(".spec-errors li")
    expect(errors).to_have_count(3)
    expect(errors.nth(0)).to_contain_text(f"line {line_of(BAD_SPEC, 'constant')}: args[2] ('n').role")
    expect(errors.nth(1)).to_contain_text(f"line {line_of(BAD_SPEC, 'block = []')}: launch[0].block")
    expect(errors.nth(2)).to_contain_text(f"line {line_of(BAD_SPEC, 'args = [\"x\", \"y\"]')}: launch[0].args")
    expect(errors.nth(2)).to_contain_text("takes 3")
    marked = page.locator(".code.marked .hll")
    expect(marked).to_have_count(3)
    expect(marked.nth(0)).to_contain_text('role = "constant"')
    expect(marked.nth(1)).to_contain_text("block = []")
    expect(marked.nth(2)).to_contain_text('args = ["x", "y"]')
    # the uploaded file is back in the text box, ready to edit
    expect(page.locator("textarea[name=spec_toml]")).to_have_value(BAD_SPEC)
    expect(page.locator("textarea[name=reference_source]")).to_have_value(SIMPLE_REFERENCE)
    page.screenshot(path=str(artifacts / "upload-spec-errors.png"), full_page=True)
    assert feed("counts")["problems"] == before["problems"]

    page.fill("textarea[name=spec_toml]", GOOD_SPEC)
    page.click("button:has-text('Check and save')")
    expect(page.locator("h1")).to_contain_text("Vector scale", timeout=60000)
    assert feed("counts")["problems"] == before["problems"] + 1

    page.goto(f"{server.url}/docs/spec")
    expect(page.locator("article h1")).to_contain_text("Problem spec reference")
