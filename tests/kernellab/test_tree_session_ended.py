"""The explorer's tree request once the session has ended: 401 and HX-Redirect to the login page, not a login page.

static/js/explorer.js loads the tree (and retries it with backoff while the server is busy). It sent no
HX-Request, so after a logout elsewhere or an expiry the server answered with the login redirect, fetch followed it,
the login page's HTML failed to parse as JSON and the page retried for ever. It now asks as htmx asks (HX-Request,
HX-Current-URL) and goes to the HX-Redirect it is answered with: the login page, next= the explorer page."""
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedded_setup")]

LOGIN = "/accounts/login/"
EXPLORER_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "explorer.js"


def _next_of(location: str) -> str:
    parts = urlsplit(location)
    assert parts.path == LOGIN
    return parse_qs(parts.query)["next"][0]


def _tree(client, run, **headers):
    return client.get(reverse("run-tree", args=[run.pk]), HTTP_ACCEPT="application/json", **headers)


def test_the_tree_asked_as_the_page_asks_after_a_logout_gets_401_and_hx_redirect_to_the_explorer(client, members, node):
    run = node.run
    client.force_login(members["viewer"])
    assert _tree(client, run, HTTP_HX_REQUEST="true").status_code == 200  # logged in: the tree, header or not
    client.logout()  # "logged out in another tab"
    response = _tree(client, run, HTTP_HX_REQUEST="true",
                     HTTP_HX_CURRENT_URL=f"http://testserver/runs/{run.pk}/?node=n1")
    assert response.status_code == 401 and not response.content
    assert not response.has_header("Location")  # fetch would follow it to the login page
    assert _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/?node=n1"
    # The login page it names opens and, once logged in, goes back to the explorer with its node.
    login = client.get(response["HX-Redirect"])
    assert login.status_code == 200 and login.context["next"] == f"/runs/{run.pk}/?node=n1"
    back = client.post(response["HX-Redirect"], {"username": "viewer", "password": "pw-viewer-123",
                                                 "next": login.context["next"]})
    assert back.status_code == 302 and back["Location"] == f"/runs/{run.pk}/?node=n1"


def test_without_the_page_address_next_is_the_explorer_not_the_tree(client, node):
    run = node.run
    response = _tree(client, run, HTTP_HX_REQUEST="true")
    assert response.status_code == 401 and _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/"


def test_the_tree_asked_without_hx_request_is_still_the_plain_login_redirect(client, node):
    """What the page used to get: a redirect fetch follows to an HTML page."""
    run = node.run
    response = _tree(client, run)
    assert response.status_code == 302 and _next_of(response["Location"]) == f"/runs/{run.pk}/tree.json"


def test_the_page_asks_for_the_tree_as_htmx_does_and_follows_hx_redirect():
    """explorer.js (no browser here to run it: tests/browser/test_tree_session_ended.py does when Chromium is
    installed): the tree is fetched with HX-Request and the page's address, and HX-Redirect is followed."""
    source = EXPLORER_JS.read_text()
    fetch = source[source.index("function fetchTree()"):]
    fetch = fetch[:fetch.index("\n  }\n")]
    assert "root.dataset.treeUrl" in fetch
    assert '"HX-Request": "true"' in fetch and '"HX-Current-URL": window.location.href' in fetch
    assert source.count("fetch(") == 1  # every tree request goes through fetchTree
    assert 'response.headers.get("HX-Redirect")' in source and "window.location.assign(target)" in source
