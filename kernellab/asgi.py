import ctypes
import logging
import os
import threading
import time

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kernellab.settings")
django_asgi_app = get_asgi_application()

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import SuspiciousOperation  # noqa: E402
from django.http import Http404  # noqa: E402

log = logging.getLogger(__name__)


class StaticFilesHandler(ASGIStaticFilesHandler):
    """Django's static files handler, except that a path out of the static folders (`/static/../../data/secret_key`)
    is a 404 and one warning line: Django's only maps Http404, so its SuspiciousFileOperation escaped as a bare
    500 without the security headers, and a traceback in the log that anyone could repeat at will."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousOperation:
            # The path as repr: one line, whatever it holds; not the exception, which repeats it unescaped.
            log.warning("Refused a static file path outside the static folders: %r.", request.path)
            raise Http404("No such static file.") from None


if settings.KERNELLAB_SERVE_STATIC:
    # One process serves the vendored JS/CSS too, so the embedded setup needs no other server.
    django_asgi_app = StaticFilesHandler(django_asgi_app)

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from kernellab.routing import websocket_urlpatterns  # noqa: E402

from asgiref.sync import ThreadSensitiveContext  # noqa: E402


class ThreadPerConnection:
    """The database work of each websocket (its session, user, run and catch-up reads) on a thread
    of its own, as Django gives each HTTP request: otherwise every socket's work queues behind one
    thread, and under load handshakes wait past daphne's timeout."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async with ThreadSensitiveContext():
            return await self.app(scope, receive, send)


def return_freed_memory(interval_s: float) -> threading.Thread | None:
    """glibc keeps what threads freed in its per-thread arenas, so after a burst of requests and
    sockets a web process would stay at its peak size: trimming every few seconds hands the freed
    pages back to the system (KERNELLAB_MALLOC_TRIM_S, 0 = never; nothing to do off glibc)."""
    if interval_s <= 0:
        return None
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            trim(0)

    thread = threading.Thread(target=loop, name="malloc-trim", daemon=True)
    thread.start()
    return thread


return_freed_memory(float(os.environ.get("KERNELLAB_MALLOC_TRIM_S", "5") or 0))

from kernellab import config  # noqa: E402

# 1/0, true/false, yes/no or on/off: settings already stopped start-up on anything else (config.web_processes).
if config.warm_start():
    # Before the first request, not during it (kernellab/warmup.py says why).
    from kernellab.warmup import warm_process  # noqa: E402

    warm_process()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": ThreadPerConnection(AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
