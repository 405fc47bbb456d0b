"""Ctrl-C while Django is still loading (the first half second of ./kl search) ends with a line, not a traceback."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import manage

ROOT = Path(__file__).resolve().parents[1]


def test_an_interrupt_before_the_command_runs_is_one_line_and_status_130(monkeypatch, capsys):
    import django.core.management

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(django.core.management, "execute_from_command_line", interrupted)
    monkeypatch.setattr(sys, "argv", ["manage.py", "search", "saxpy"])
    with pytest.raises(SystemExit) as ended:
        manage.main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == "\nInterrupted.\n"


def test_sigint_while_django_loads_prints_no_traceback():
    process = subprocess.Popen([sys.executable, "manage.py", "help"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(0.15)  # past the interpreter's start, inside Django's imports and setup
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if process.returncode == 0:
        pytest.skip("help finished before the interrupt")
    assert "Traceback" not in err, err
    assert process.returncode in (130, -signal.SIGINT), (process.returncode, err)
