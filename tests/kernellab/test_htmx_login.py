"""QA bug 4: once a session ends, the next htmx action must not load the login page inside the node panel.

@login_required answers with a 302 to the login page; htmx followed it and swapped the whole login page into the
panel. An htmx request now gets HX-Redirect to the login page with next= the page the user is on (HX-Current-URL),
which htmx turns into a full-page visit; a plain request still gets its 302."""
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from kernellab.models import Comment, Node, NodeState

pytestmark = pytest.mark.usefixtures("embedded_setup")

LOGIN = "/accounts/login/"


def _next_of(location: str) -> str:
    parts = urlsplit(location)
    assert parts.path == LOGIN
    return parse_qs(parts.query)["next"][0]


@pytest.fixture
def panel_node(run):
    root = Node.objects.create(run=run, key="0", kernel=run.problem.reference, origin="root", state=NodeState.MEASURED,
                               speedup=1.0)
    return Node.objects.create(run=run, key="290", parent=root, kernel=run.problem.reference, depth=1,
                               state=NodeState.FORECAST)


def _logged_out_htmx(client, run, node, **headers):
    """QA's steps: the run page open at ?node=290, the session ended in another tab, then a comment posted by htmx."""
    return client.post(f"/runs/{run.pk}/nodes/{node.key}/comment", {"body": "try a wider tile"},
                       HTTP_HX_REQUEST="true", **headers)


def test_an_htmx_post_without_a_session_gets_hx_redirect_to_the_login_with_the_page_the_user_is_on(client, members, panel_node):
    run = panel_node.run
    client.force_login(members["engineer"])
    client.logout()  # "log out in another tab"
    response = _logged_out_htmx(client, run, panel_node,
                                HTTP_HX_CURRENT_URL=f"http://testserver/runs/{run.pk}/?node=290")
    assert response.status_code == 401 and not response.content  # nothing to swap into the panel
    assert not response.has_header("Location")  # htmx would follow it inside the request
    assert _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/?node=290"
    assert not Comment.objects.exists()
    # The full page the browser then opens names the page to return to, and says why the user is there.
    login = client.get(response["HX-Redirect"])
    assert login.status_code == 200 and login.context["next"] == f"/runs/{run.pk}/?node=290"
    assert "Your session ended; log in again to go on." in login.content.decode()
    # Logging in there goes back to the run page with its node open.
    back = client.post(response["HX-Redirect"], {"username": "engineer", "password": "pw-engineer-123",
                                                 "next": login.context["next"]})
    assert back.status_code == 302 and back["Location"] == f"/runs/{run.pk}/?node=290"


def test_an_htmx_get_of_a_panel_without_a_session_is_redirected_the_same_way(client, panel_node):
    run = panel_node.run
    response = client.get(f"/runs/{run.pk}/nodes/290/", HTTP_HX_REQUEST="true",
                          HTTP_HX_CURRENT_URL=f"http://testserver/runs/{run.pk}/?node=290")
    assert response.status_code == 401
    assert _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/?node=290"


def test_a_current_url_of_another_site_falls_back_to_the_run_page(client, panel_node):
    run = panel_node.run
    for current in ("https://evil.example/runs/1/?node=290", "javascript:alert(1)", ""):
        headers = {"HTTP_HX_CURRENT_URL": current} if current else {}
        response = _logged_out_htmx(client, run, panel_node, **headers)
        assert response.status_code == 401
        assert _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/", current  # never the comment endpoint


def test_an_htmx_request_outside_a_run_goes_to_the_login_without_next(client, workspace):
    response = client.get(f"/w/{workspace.slug}/verifications/?part=active", HTTP_HX_REQUEST="true",
                          HTTP_HX_CURRENT_URL="https://evil.example/")
    assert response.status_code == 401 and response["HX-Redirect"] == LOGIN


def test_a_plain_request_without_a_session_still_gets_the_redirect(client, panel_node):
    run = panel_node.run
    page = client.get(f"/runs/{run.pk}/?node=290")
    assert page.status_code == 302 and _next_of(page["Location"]) == f"/runs/{run.pk}/?node=290"
    assert not page.has_header("HX-Redirect")
    post = client.post(f"/runs/{run.pk}/nodes/290/comment", {"body": "x"})
    assert post.status_code == 302 and _next_of(post["Location"]) == f"/runs/{run.pk}/nodes/290/comment"
    # htmx's header must say "true": anything else is not an htmx request.
    other = client.post(f"/runs/{run.pk}/nodes/290/comment", {"body": "x"}, HTTP_HX_REQUEST="false")
    assert other.status_code == 302


def test_a_logged_in_htmx_request_and_other_redirects_are_left_alone(client, members, panel_node):
    run = panel_node.run
    client.force_login(members["engineer"])
    response = _logged_out_htmx(client, run, panel_node,
                                HTTP_HX_CURRENT_URL=f"http://testserver/runs/{run.pk}/?node=290")
    assert response.status_code == 200 and not response.has_header("HX-Redirect")
    assert Comment.objects.filter(node=panel_node).count() == 1
    # A redirect that is not to the login page (a cancel without confirmation, without htmx) is untouched.
    cancel = client.post(f"/runs/{run.pk}/action", {"action": "cancel"})
    assert cancel.status_code == 302 and cancel["Location"] == f"/runs/{run.pk}/cancel"


def test_the_login_page_without_next_does_not_speak_of_a_session(client, db):
    assert "Your session ended" not in client.get(LOGIN).content.decode()


def test_the_csrf_check_still_runs_first(members, panel_node):
    """A logged-out htmx POST with a valid CSRF cookie and header reaches login_required (logout does not rotate the
    token): the redirect, not a 403, is what the middleware turns into HX-Redirect."""
    run = panel_node.run
    client = Client(enforce_csrf_checks=True)
    token = client.get("/accounts/login/").cookies["csrftoken"].value
    response = client.post(f"/runs/{run.pk}/nodes/290/comment", {"body": "x"}, HTTP_HX_REQUEST="true",
                           HTTP_X_CSRFTOKEN=token, HTTP_HX_CURRENT_URL=f"http://testserver/runs/{run.pk}/?node=290")
    assert response.status_code == 401 and _next_of(response["HX-Redirect"]) == f"/runs/{run.pk}/?node=290"
