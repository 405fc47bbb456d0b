"""A team managed in the browser: an admin invites someone, they join through the link, the admin
changes their role and removes them; the newcomer's pages follow each change."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_an_admin_invites_a_newcomer_changes_their_role_and_removes_them(server, browser_as, chromium):
    admin = browser_as("admin")
    admin.click("nav >> text=Members")
    expect(admin.locator("h1")).to_contain_text("Members of Team")
    invite = admin.locator("#member-invite-form")
    invite.locator("select[name=role]").select_option("engineer")
    invite.locator("input[name=note]").fill("Grace, new on the team")
    invite.locator("button[type=submit]").click()
    expect(admin.locator("#members-notice")).to_contain_text("joins as engineer")
    link = admin.locator("#invitation-link").input_value()
    assert re.fullmatch(rf"{re.escape(server.url)}/invitations/[\w-]{{40,}}/", link)
    expect(admin.locator("#invitation-table")).to_contain_text("Grace, new on the team")

    context = chromium.new_context()
    newcomer = context.new_page()
    newcomer.set_default_timeout(15000)
    newcomer.goto(link)
    expect(newcomer.locator("#invitation")).to_contain_text("invites you to join Team as engineer")
    newcomer.fill("input[name=username]", "grace")
    newcomer.fill("input[name=password]", "grace-password-1")
    newcomer.fill("input[name=password_again]", "grace-password-1")
    newcomer.click("button:has-text('Create my account and join')")
    expect(newcomer.locator("h1")).to_contain_text("Team")
    expect(newcomer.locator("h1")).to_contain_text("you are engineer")
    expect(newcomer.locator("main >> text=Upload a reference kernel")).to_be_visible()

    admin.reload()
    row = admin.locator("#member-table tr[data-member='grace']")
    expect(row.locator(".member-role")).to_have_text("Engineer")
    expect(admin.locator("#invitation-table")).not_to_contain_text("Grace, new on the team")
    row.locator("select[name=role]").select_option("viewer")
    row.locator("button:has-text('Change role')").click()
    expect(admin.locator("#members-notice")).to_have_text("grace is now viewer.")
    expect(admin.locator("#member-table tr[data-member='grace'] .member-role")).to_have_text("Viewer")

    newcomer.reload()
    expect(newcomer.locator("h1")).to_contain_text("you are viewer")
    expect(newcomer.locator("main >> text=Upload a reference kernel")).to_have_count(0)

    admin.once("dialog", lambda dialog: dialog.accept())
    admin.locator("#member-table tr[data-member='grace'] button:has-text('Remove')").click()
    expect(admin.locator("#members-notice")).to_have_text("grace was removed from Team.")
    expect(admin.locator("#member-table tr[data-member='grace']")).to_have_count(0)

    response = newcomer.goto(f"{server.url}/w/team/")
    assert response.status == 404
    newcomer.goto(link)
    expect(newcomer.locator("#invitation")).to_contain_text("has already been used")
    context.close()


def test_the_last_admin_is_told_why_they_cannot_step_down(server, browser_as):
    admin = browser_as("admin")
    admin.goto(f"{server.url}/w/team/members/")
    row = admin.locator("#member-table tr[data-member='admin']")
    row.locator("select[name=role]").select_option("engineer")
    row.locator("button:has-text('Change role')").click()
    expect(admin.locator("#members-error")).to_contain_text("admin is the last admin of Team and cannot be made engineer")
    expect(admin.locator("#member-table tr[data-member='admin'] .member-role")).to_have_text("Admin")
