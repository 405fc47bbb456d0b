"""An htmx request whose session has ended gets a full-page trip to the login page, not a login page in a panel.

@login_required answers a request without a session with a redirect to LOGIN_URL. A browser follows it for a page,
but htmx follows it inside its XMLHttpRequest and swaps the whole login page (header and all) into the element it
was aimed at: the node panel, the run's controls. This middleware answers such a request instead with
`HX-Redirect: <login URL>?next=<the page the user is on>`, which htmx turns into `window.location.href = ...`: the
login page fills the window and, once logged in, the user is back where they were.

The page is HX-Current-URL's path and query (the browser's address when htmx made the request) where it is of this
site; otherwise the run page the request belongs to, or no `next` at all (the login then goes to LOGIN_REDIRECT_URL).
Never the request's own path: a panel fragment or an action's POST endpoint is no page to land on.

Status 401 with no body: htmx 2.0.11 (static/vendor) acts on HX-Redirect before it looks at the status (its
`responseHandling`), whatever the status, and by its defaults swaps no 4xx, so even a client that ignored the header
would leave the panel as it was; a script that is not htmx sees the request refused, not a 200 page of nothing.
What a POST carried (a comment's text) is lost either way: the login page says the session ended."""
from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import resolve_url
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme

REDIRECTS = (301, 302, 303, 307, 308)


def is_htmx(request) -> bool:
    return request.headers.get("HX-Request") == "true"


def _is_login_redirect(response) -> bool:
    if response.status_code not in REDIRECTS or not response.has_header("Location"):
        return False
    login = urlsplit(resolve_url(settings.LOGIN_URL))
    target = urlsplit(response["Location"])
    if target.path != login.path:
        return False
    # LOGIN_URL may name another host (a single sign-on page): then the Location must name that host too.
    return not login.netloc or target.netloc == login.netloc


def page_to_return_to(request) -> str:
    """The page the user was on when htmx made the request (path and query), or "" where that is unknown."""
    current = request.headers.get("HX-Current-URL", "")
    if current and url_has_allowed_host_and_scheme(current, allowed_hosts={request.get_host()},
                                                   require_https=request.is_secure()):
        parts = urlsplit(current)
        if parts.scheme in ("http", "https") and parts.netloc and parts.path.startswith("/"):
            return parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        run_id = resolve(request.path_info).kwargs.get("run_id")
    except Resolver404:
        return ""
    return reverse("run-explorer", kwargs={"run_id": run_id}) if run_id is not None else ""


def htmx_login_redirect(request) -> HttpResponse:
    next_page = page_to_return_to(request)
    login = resolve_url(settings.LOGIN_URL)
    location = redirect_to_login(next_page, login)["Location"] if next_page else login
    response = HttpResponse(status=401)
    response["HX-Redirect"] = location
    return response


class HtmxLoginRedirectMiddleware:
    """After AuthenticationMiddleware: an htmx request answered with a redirect to the login page gets HX-Redirect."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if is_htmx(request) and _is_login_redirect(response):
            return htmx_login_redirect(request)
        return response
