"""A /static/ path that leaves the static folders (kernellab/asgi.py `StaticFilesHandler`) answers 404 with one
warning line, not a bare 500 and a traceback (audit finding 6)."""
import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.testing import ApplicationCommunicator


@pytest.fixture(scope="module")
def application():
    from kernellab.asgi import application

    return application


def _get(application, path: str) -> tuple[int, bytes]:
    """The answer to one GET, from a thread of its own: asyncio.run (or an async test) fails in a thread where another
    loop runs, as the browser tests' Playwright leaves one in the main thread."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, _ask(application, path)).result(timeout=60)


async def _ask(application, path: str) -> tuple[int, bytes]:
    scope = {"type": "http", "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(30)
    body = b""
    while True:
        message = await communicator.receive_output(30)
        body += message.get("body", b"")
        if not message.get("more_body"):
            return start["status"], body


@pytest.mark.parametrize("path", [
    "/static/../../data/secret_key",
    "/static/..%2f..%2fkernellab%2fsettings.py",
    "/static/../kernellab/settings.py",
])
def test_a_path_out_of_the_static_folders_is_a_404_with_one_warning_line(application, caplog, path):
    with caplog.at_level(logging.WARNING):
        status, body = _get(application, path)
    assert status == 404
    assert b"SECRET_KEY" not in body and b"Traceback" not in body
    assert [(r.levelno, r.exc_info) for r in caplog.records] == [(logging.WARNING, None)], caplog.text
    assert caplog.records[0].getMessage() == f"Refused a static file path outside the static folders: {path!r}."


def test_a_static_file_is_still_served(application):
    status, body = _get(application, "/static/favicon.svg")
    assert status == 200 and body
