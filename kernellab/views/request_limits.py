"""A form post over the size Django reads (DATA_UPLOAD_MAX_MEMORY_SIZE) answered with a page that says so.

Django refuses such a post (RequestDataTooBig) when something first reads request.POST: for every post that is the
CSRF check, before any view runs, and the answer is its bare 400 page (with DEBUG on, a traceback). A person who
pasted a whole file into an upload form's text box then sees an error page that names no limit. This middleware,
placed before the CSRF middleware, reads the post first and answers a refused one with the limits and what to do
instead. It keeps nothing of the post: the browser's Back button returns to the form with what was typed. Pages keep
such a form from being sent at all (static/js/forms.js, reading the limit from <body data-post-limit>), so this page is
for a client without JavaScript or a form the script cannot measure."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.shortcuts import render


class RequestTooBigMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method != "POST":
            return None
        try:
            request.POST  # noqa: B018 - Django's own parse, which the CSRF check would start next
        except RequestDataTooBig:
            try:
                sent = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                sent = 0
            return render(request, "kernellab/request_too_big.html", {
                "sent_kib": sent // 1024, "request_kib": settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024,
                "text_kib": settings.KERNELLAB_UPLOAD_MAX_BYTES // 1024}, status=413)
        return None
