"""The `kl` script's install stamps: after `./kl test` (the dev extra, which holds everything running needs),
`./kl run` and `./kl search` install nothing more; a stamp older than pyproject.toml installs again.

Run on a copy of the script beside a fake .venv whose python only records its calls, so nothing is installed."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path):
    shutil.copy(ROOT / "kl", tmp_path / "kl")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls.log"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    tools = tmp_path / "tools"  # bwrap present, so that system_packages installs nothing even as root
    tools.mkdir()
    (tools / "bwrap").write_text("#!/bin/sh\nexit 0\n")
    (tools / "bwrap").chmod(0o755)
    return tmp_path


def kl(checkout: Path, *args: str) -> list[str]:
    log = checkout / ".venv" / "calls.log"
    log.write_text("")
    env = {**os.environ, "PATH": f"{checkout / 'tools'}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(checkout / "kl"), *args], cwd=checkout, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines()


def installs(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("-m pip install -e")]


def stamp(checkout: Path, name: str, newer_than_pyproject: bool = True) -> None:
    path = checkout / ".venv" / f".installed-{name}"
    path.touch()
    pyproject = (checkout / "pyproject.toml").stat().st_mtime
    when = pyproject + 10 if newer_than_pyproject else pyproject - 10
    os.utime(path, (when, when))


def test_run_after_test_installs_nothing_more(checkout):
    stamp(checkout, "dev")
    calls = kl(checkout, "run", "--port", "9000")
    assert installs(calls) == []
    assert calls[-1] == "manage.py serve --port 9000"
    assert installs(kl(checkout, "search", "saxpy")) == []
    assert not (checkout / ".venv" / ".installed-run").exists()


def test_run_installs_where_no_install_is_up_to_date(checkout):
    calls = kl(checkout, "run")
    assert len(installs(calls)) == 1 and installs(calls)[0].split()[-1] in (".", ".[gpu]")
    assert (checkout / ".venv" / ".installed-run").exists()
    assert installs(kl(checkout, "run")) == []  # its own stamp is up to date now


def test_a_dev_stamp_older_than_pyproject_does_not_count(checkout):
    stamp(checkout, "dev", newer_than_pyproject=False)
    assert len(installs(kl(checkout, "run"))) == 1

