"""What start-up (kernellab/config.py) does for security: the data folder is readable only by its owner (audit
finding 4), and a SECRET_KEY set with DEBUG off is one that `check --deploy` accepts (finding 7)."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import config

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- 4. the data folder ------------------------------------------------------------------------------------------

@pytest.fixture
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_data_folder_is_readable_only_by_its_owner(tmp_path, monkeypatch, usual_umask):
    """It was made with the umask's 755: any local account could copy the database and its session keys."""
    folder = tmp_path / "somewhere" / "data"
    monkeypatch.setenv("KERNELLAB_DATA_DIR", str(folder))
    assert config.data_dir() == folder
    assert _mode(folder) == 0o700


def test_an_existing_data_folder_others_can_read_is_tightened_with_a_line(tmp_path, monkeypatch, capsys, usual_umask):
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "kernellab.sqlite3").write_text("")
    monkeypatch.setenv("KERNELLAB_DATA_DIR", str(folder))
    config.data_dir()
    assert _mode(folder) == 0o700
    notice = capsys.readouterr().err
    assert notice == f"KernelLab made its data folder {str(folder)!r} readable only by its owner (mode 755 to 700).\n"
    config.data_dir()  # once tight, nothing more is said
    assert capsys.readouterr().err == ""


def test_a_data_folder_of_another_owner_is_left_as_it_is(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o755)
    monkeypatch.setenv("KERNELLAB_DATA_DIR", str(folder))
    monkeypatch.setattr(config.os, "geteuid", lambda: folder.stat().st_uid + 1)
    config.data_dir()
    assert _mode(folder) == 0o755 and capsys.readouterr().err == ""


def test_a_command_on_a_fresh_data_folder_makes_it_owner_only(tmp_path, usual_umask):
    """Every manage.py command (serve, migrate, ./kl run's) reads settings, which make the folder through config."""
    folder = tmp_path / "fresh" / "data"
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} and not k.startswith("KERNELLAB_")}
    env["KERNELLAB_DATA_DIR"] = str(folder)
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert _mode(folder) == 0o700
    assert _mode(folder / "secret_key") == 0o600


# --- 7. SECRET_KEY -----------------------------------------------------------------------------------------------

RECIPE = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


# Fixed keys (secrets.token_urlsafe's), so that the tests' names are the same in every run.
KEY_40 = "KZoivgudkzYZhvv8JDKLPK50mP8J9iFx3jtOpArg"          # token_urlsafe(30)
KEY_67 = "WFB9uSrbu3eWtktLEfja1qUSv_19dYE17uq2qPZX42msfmRO51cgYoa45jfkH9QdwDY"  # token_urlsafe(50)
KEY_50 = "2AWDCux85KBO8I8TZlcrUvlIGDm3Y7eu3IP2OGofEUC085CTHs"  # the shortest that check --deploy accepts


@pytest.mark.parametrize("key", [
    KEY_40,                     # was accepted, then check --deploy failed (security.W009)
    KEY_50[:49],                # 49 characters
    "a" * 49 + "b",             # 50 characters, 2 different ones
    "abcd" * 20,                # 80 characters, 4 different ones
    "django-insecure-" + KEY_67,
])
def test_a_key_check_deploy_would_refuse_stops_start_up_with_one_sentence(tmp_path, monkeypatch, key):
    monkeypatch.setenv("SECRET_KEY", key)
    with pytest.raises(config.StartupError) as refused:
        config.secret_key(False, tmp_path)
    sentence = str(refused.value)
    assert sentence.startswith("SECRET_KEY must be at least 50 characters long, with at least 5 different ones")
    assert sentence.endswith(f"make one with {RECIPE}.")


@pytest.mark.parametrize("key", [KEY_67, KEY_50, "abcde" * 10])
def test_a_key_check_deploy_accepts_is_accepted(tmp_path, monkeypatch, key):
    from django.core.checks.security.base import check_secret_key
    from django.test import override_settings

    monkeypatch.setenv("SECRET_KEY", key)
    assert config.secret_key(False, tmp_path) == key
    with override_settings(SECRET_KEY=key):
        assert check_secret_key(None) == []


def test_with_debug_on_any_key_is_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "short")
    assert config.secret_key(True, tmp_path) == "short"


def test_the_generated_key_passes_check_deploy(tmp_path, monkeypatch):
    from django.core.checks.security.base import check_secret_key
    from django.test import override_settings

    monkeypatch.delenv("SECRET_KEY", raising=False)
    key = config.secret_key(False, tmp_path)
    with override_settings(SECRET_KEY=key):
        assert check_secret_key(None) == []


def test_a_short_key_stops_manage_py_with_the_sentence(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} and not k.startswith("KERNELLAB_")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), "DEBUG": "false", "SECRET_KEY": KEY_40})
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "KernelLab cannot start: SECRET_KEY must be at least 50 characters long, with at least 5 different ones and "
        f"not starting with 'django-insecure-', when DEBUG is off; make one with {RECIPE}.")
