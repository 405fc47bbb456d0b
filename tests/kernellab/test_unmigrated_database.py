"""A management command on a database that was never migrated (a fresh KERNELLAB_DATA_DIR, an empty
PostgreSQL database) stops with one paragraph naming the database and `manage.py migrate`, not with
"no such table"; a migrated database passes the check."""
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.utils import ConnectionHandler

from kernellab.management import database

ROOT = Path(__file__).resolve().parents[2]
SQLITE = "django.db.backends.sqlite3"


@pytest.fixture
def fresh_sqlite(tmp_path, monkeypatch, django_db_blocker):
    """The check pointed at an empty SQLite file (the commands stop at the check, before any query)."""
    path = tmp_path / "fresh" / "kernellab.sqlite3"
    path.parent.mkdir()
    # (after the browser tests Playwright's event loop still runs in this thread, and Django refuses to open a new
    # connection "from an async context"; a command is never run in one)
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    handler = ConnectionHandler({"default": {"ENGINE": SQLITE, "NAME": str(path)}})
    monkeypatch.setattr(database, "connections", handler)
    with django_db_blocker.unblock():
        yield path
    handler.close_all()


@pytest.mark.parametrize("command", [
    ["search", "--list"],
    ["search", "saxpy", "--backend", "replay"],
    ["kernellab_bootstrap"],
    ["import_kernelbench"],
    ["import_dataset", str(ROOT / "tests" / "lab" / "missing.jsonl")],
    ["export_dataset", "out.jsonl", "--from", "db"],
    ["train_surrogate", "--dataset", "imported_name"],
    ["export_rl", "--dataset", "imported_name", "--out", "rl.jsonl"],
    ["evaluate_surrogate", "--dataset", "imported_name", "--surrogate", "roofline"],
])
def test_a_command_on_an_unmigrated_database_names_it_and_the_fix(fresh_sqlite, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CommandError) as raised:
        call_command(*command, stdout=io.StringIO(), stderr=io.StringIO())
    message = str(raised.value)
    assert f"The SQLite database {fresh_sqlite} has no KernelLab tables: it was never migrated." in message
    assert "`.venv/bin/python manage.py migrate`" in message and "./kl run" in message


def test_export_dataset_also_points_at_the_records_alone(fresh_sqlite, tmp_path):
    with pytest.raises(CommandError, match=r"--from records"):
        call_command("export_dataset", str(tmp_path / "out.jsonl"), stdout=io.StringIO(), stderr=io.StringIO())


def test_a_dataset_file_needs_no_database(fresh_sqlite, tmp_path, settings, capsys):
    """Recorded data and a dataset file, printed and not saved: nothing to migrate for, so no check."""
    from tests.lab.helpers import SAXPY_DIR

    settings.DATA_DIR = tmp_path / "data"
    out = tmp_path / "saxpy.jsonl"
    call_command("export_dataset", str(out), "--from", "records", "--problems-dir", str(SAXPY_DIR))
    call_command("evaluate_surrogate", "--dataset", str(out), "--surrogate", "roofline", "--no-save")
    assert "roofline" in capsys.readouterr().out


def test_a_partly_migrated_database_lists_what_is_missing(fresh_sqlite, monkeypatch):
    monkeypatch.setattr(database, "unapplied_migrations", lambda alias="default": (
        ["kernellab.0012_problem_reference_measurements"], {"kernellab.0001_initial", "auth.0001_initial"}))
    with pytest.raises(CommandError) as raised:
        call_command("search", "--list", stdout=io.StringIO())
    assert ("has 1 unapplied migration (kernellab.0012_problem_reference_measurements): its tables are older "
            "than this code.") in str(raised.value)


def test_an_unreachable_postgresql_database_is_named_without_its_password(monkeypatch, django_db_blocker):
    pytest.importorskip("psycopg")
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # (as in fresh_sqlite)
    handler = ConnectionHandler({"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": "kernellab", "USER": "lab", "PASSWORD": "s3cret-pw",
        "HOST": "127.0.0.1", "PORT": "1", "OPTIONS": {"connect_timeout": 3}}})
    monkeypatch.setattr(database, "connections", handler)
    try:
        with django_db_blocker.unblock(), pytest.raises(CommandError) as raised:
            database.require_migrated_database()
    finally:
        handler.close_all()
    message = str(raised.value)
    assert message.startswith("Cannot open the PostgreSQL database 'kernellab' on 127.0.0.1:1 (user lab) (")
    assert "s3cret-pw" not in message


@pytest.mark.django_db
def test_a_migrated_database_passes_the_check(workspace):
    database.require_migrated_database()
    out = io.StringIO()
    call_command("search", "--list", stdout=out)  # the test database is migrated: the command runs
    assert "Traceback" not in out.getvalue()


def test_manage_py_on_a_fresh_data_dir_exits_with_the_message_not_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env["KERNELLAB_DATA_DIR"] = str(tmp_path)
    result = subprocess.run([sys.executable, "manage.py", "search", "--list"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "no such table" not in result.stderr
    assert (f"CommandError: The SQLite database {tmp_path / 'kernellab.sqlite3'} has no KernelLab tables: it was "
            "never migrated. Run `.venv/bin/python manage.py migrate` (with the same KERNELLAB_DATA_DIR) first; "
            "`./kl run` and `./kl search` migrate by themselves before they start.") in result.stderr
