"""manage.py serve (QA round 3, command line): a port or process count out of range is refused when the arguments are
read, a port it cannot listen on is one sentence before anything starts (one web process or several), and a web
process that exits with an error makes serve exit with an error too."""
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nothing_starts(monkeypatch):
    """serve with its service checks passed, and any start of a child or of serve's work failing the test."""
    from kernellab.management.commands import serve

    monkeypatch.setattr(serve, "check_services", lambda: None)
    monkeypatch.setattr(serve, "require_migrated_database", lambda: None)
    monkeypatch.setattr(serve, "local_gpu_queue", lambda: None)
    monkeypatch.setattr(serve.ChildProcesses, "start",
                        lambda self, *a, **k: pytest.fail("serve started a child before refusing"))
    return serve


@pytest.fixture
def refused_before_anything(monkeypatch):
    """Reaching the service checks means the arguments were taken: the test fails there."""
    from kernellab.management.commands import serve

    monkeypatch.setattr(serve, "check_services", lambda: pytest.fail("the arguments were taken"))


@pytest.mark.parametrize("port, message", [("99999", "must be from 0 to 65535, not 99999"),
                                           ("-1", "must be from 0 to 65535, not -1"),
                                           ("65536", "must be from 0 to 65535, not 65536"),
                                           ("http", "must be a whole number from 0 to 65535, not 'http'")])
def test_a_port_out_of_range_is_refused_when_the_arguments_are_read(refused_before_anything, port, message, capsys):
    with pytest.raises(CommandError, match=rf"argument --port: {message}"):
        call_command("serve", "--no-worker", f"--port={port}")
    assert "KernelLab at" not in capsys.readouterr().out


@pytest.mark.parametrize("count", ["0", "-2"])
def test_fewer_than_one_web_process_is_refused_as_the_variable_is(refused_before_anything, count):
    with pytest.raises(CommandError, match=rf"argument --web-processes: must be at least 1, not {count}$"):
        call_command("serve", "--no-worker", f"--web-processes={count}")


@pytest.fixture
def busy_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        yield held.getsockname()[1]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_port_in_use_is_one_sentence_before_anything_starts(nothing_starts, busy_port, processes, capsys):
    with pytest.raises(CommandError, match=rf"^Cannot listen on 127\.0\.0\.1:{busy_port}: Address already in use\.$"):
        call_command("serve", "--no-worker", "--port", str(busy_port), "--web-processes", processes)
    assert "KernelLab at" not in capsys.readouterr().out


def test_a_host_that_does_not_resolve_is_one_sentence(nothing_starts):
    with pytest.raises(CommandError, match=r"^Cannot listen on nosuchhost\.invalid:8142: .+\.$"):
        call_command("serve", "--no-worker", "--host", "nosuchhost.invalid", "--port", "8142")


def test_several_processes_on_a_host_that_is_not_this_machines_close_what_they_opened(nothing_starts):
    with pytest.raises(CommandError, match=r"^Cannot listen on 192\.0\.2\.1:0: Cannot assign requested address\.$"):
        call_command("serve", "--no-worker", "--host", "192.0.2.1", "--port", "0", "--web-processes", "3")


# A web process that exits by itself, with an error (daphne that could not listen after all, or crashed).
SERVE = textwrap.dedent("""
    import sys
    import django
    django.setup()
    from django.core.management import execute_from_command_line
    from kernellab.management.commands import serve

    code = sys.argv[1]
    serve.check_services = lambda: None
    serve.require_migrated_database = lambda: None
    serve.web_commands = lambda host, port, count: ([([sys.executable, "-c", f"import sys; sys.exit({code})"], ())], [])
    serve.ChildProcesses.__init__.__kwdefaults__ = {"timeout": 3.0, "grace": 1.0}  # a quick test
    execute_from_command_line(["manage.py", "serve", "--no-worker", "--port", "0"])
    print("serve returned", flush=True)
""")


def _serve_with_a_web_process_exiting(tmp_path, code: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path / "data"), "DJANGO_SETTINGS_MODULE": "kernellab.settings",
                "KERNELLAB_COMPILE_SANDBOX": "none"})
    return subprocess.run([sys.executable, "-c", SERVE, str(code)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, start_new_session=True)


def test_a_web_process_that_exits_with_an_error_makes_serve_exit_with_one(tmp_path):
    ended = _serve_with_a_web_process_exiting(tmp_path, 3)
    assert ended.returncode == 1, ended.stdout + ended.stderr
    assert "CommandError: The web server exited (code 3); its log is above." in ended.stderr
    assert "Traceback" not in ended.stderr and "serve returned" not in ended.stdout


def test_a_web_process_that_exits_cleanly_is_a_clean_stop(tmp_path):
    ended = _serve_with_a_web_process_exiting(tmp_path, 0)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert "serve returned" in ended.stdout
