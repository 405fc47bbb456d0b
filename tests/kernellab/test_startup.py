"""Start-up refuses a bad setting with one sentence naming the variable, and the run command serves."""
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(args, env_extra, tmp_path, timeout=120):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), **env_extra})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "url,fragment",
    [
        ("mysql://root@localhost/x", "DATABASE_URL must start with postgresql://"),
        ("postgresql://", "DATABASE_URL must name a host and a database"),
        ("postgresql://u@host:notaport/db", "DATABASE_URL has a port that is not a number"),
    ],
)
def test_a_malformed_database_url_stops_start_up_with_one_sentence(tmp_path, url, fragment):
    result = manage(["check"], {"DATABASE_URL": url}, tmp_path)
    assert result.returncode != 0
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_redis_stops_the_server(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    result = manage(["serve", "--no-worker", "--port", "0"], {"REDIS_URL": f"redis://127.0.0.1:{port}/0"}, tmp_path)
    assert result.returncode != 0
    assert f"REDIS_URL: cannot reach Redis at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_malformed_redis_url_stops_start_up(tmp_path):
    result = manage(["check"], {"REDIS_URL": "http://example"}, tmp_path)
    assert "REDIS_URL must start with redis://" in result.stderr and result.returncode != 0


def test_an_unreachable_database_stops_the_server(tmp_path):
    result = manage(["serve", "--no-worker"], {"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}, tmp_path)
    assert result.returncode != 0
    assert "DATABASE_URL: cannot open the database" in result.stderr


def test_a_bad_debug_value_is_named(tmp_path):
    result = manage(["check"], {"DEBUG": "maybe"}, tmp_path)
    assert "DEBUG must be one of" in result.stderr


START_RUN = """
from kernellab.models import Problem
from django.contrib.auth import get_user_model
from kernellab.services.runs import run_create
run_create(problem=Problem.objects.get(name="transpose"), user=get_user_model().objects.get(username="demo"),
           generator="template", surrogate="roofline", gpu_budget=4, children_per_step=3)
"""
RUN_STATUS = """
from kernellab.models import SearchRun
run = SearchRun.objects.get()
print(run.status, run.nodes.filter(state="measured").exclude(origin="root").count(), run.status_reason)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_run_command_serves_the_login_page_on_embedded_defaults(tmp_path):
    """What `./kl run` does after installing: migrate, bootstrap, serve with a local worker."""
    assert manage(["migrate", "--noinput", "-v", "0"], {}, tmp_path, timeout=300).returncode == 0
    boot = manage(["kernellab_bootstrap"], {}, tmp_path, timeout=300)
    assert boot.returncode == 0, boot.stderr
    assert "Demo account: user demo" in boot.stdout
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["KERNELLAB_DATA_DIR"] = str(tmp_path)
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        body = b""
        for _ in range(120):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        assert b"Log in" in body
        css = urllib.request.urlopen(f"http://127.0.0.1:{port}/static/vendor/htmx-2.0.11.min.js", timeout=5).read()
        assert len(css) > 10000
        # A search on the recorded H200 data runs through the local worker (filesystem broker).
        start = manage(["shell", "-v", "0", "-c", START_RUN], {}, tmp_path, timeout=120)
        assert start.returncode == 0, start.stderr
        status = ""
        for _ in range(240):
            status = manage(["shell", "-v", "0", "-c", RUN_STATUS], {}, tmp_path).stdout.strip()
            if status.startswith("finished"):
                break
            time.sleep(1)
        assert status.startswith("finished"), status
        measured = int(status.split()[1])
        assert measured >= 1
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
