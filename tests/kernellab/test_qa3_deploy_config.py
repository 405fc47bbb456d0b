"""QA3 deploy findings 1, 7 and 8: start-up names what would otherwise fail later.

1. REDIS_URL on Redis's last database (15 of 16) derives a cache database (16) that does not exist: the cache
   then fails on every use and the login lockout is off without a word. `serve` (check_services) and
   `check --deploy` now ask the cache's server and stop with a sentence naming the variable to set.
7. A database that is not a number in REDIS_URL (or KERNELLAB_CACHE_URL) passed start-up when KERNELLAB_CACHE_URL was
   set, and the Celery worker then died with a traceback.
8. KERNELLAB_MALLOC_TRIM_S=nan (or inf) passed start-up and each web process printed a thread traceback;
   KERNELLAB_WARM_START=maybe passed and meant "on".

The tests that ask a server use the Redis at 127.0.0.1:6379 (databases 15 and 99: 99 does not exist) and skip
where none answers.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernellab import config

ROOT = Path(__file__).resolve().parents[2]
REDIS = "redis://127.0.0.1:6379"


def manage(args, env_extra, tmp_path, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"} and not k.startswith("KERNELLAB_")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), **env_extra})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def local_redis():
    import redis

    try:
        redis.Redis.from_url(f"{REDIS}/15", socket_connect_timeout=2).ping()
    except Exception as exc:
        pytest.skip(f"no Redis at 127.0.0.1:6379 ({exc})")
    return REDIS


# ---- 7. the database number of REDIS_URL and KERNELLAB_CACHE_URL -------------------------------------------

@pytest.mark.parametrize("variable,value", [
    ("REDIS_URL", f"{REDIS}/abc"),
    ("REDIS_URL", f"{REDIS}/1.5"),
    ("KERNELLAB_CACHE_URL", f"{REDIS}/abc"),
])
def test_a_database_that_is_not_a_whole_number_stops_check_even_with_a_cache_url(tmp_path, variable, value):
    env = {"REDIS_URL": f"{REDIS}/15", "KERNELLAB_CACHE_URL": f"{REDIS}/15", variable: value}
    result = manage(["check"], env, tmp_path)
    number = value.rsplit("/", 1)[1]
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"KernelLab cannot start: {variable}'s database must be a whole number, as in "
                                     f"redis://127.0.0.1:6379/0, not {number!r}.")


def test_redis_url_checks_its_database_whoever_builds_the_cache(monkeypatch):
    monkeypatch.setenv("REDIS_URL", f"{REDIS}/abc")
    with pytest.raises(config.StartupError, match="REDIS_URL's database must be a whole number"):
        config.redis_url()
    for good in (REDIS, f"{REDIS}/", f"{REDIS}/0", f"{REDIS}/15"):
        monkeypatch.setenv("REDIS_URL", good)
        assert config.redis_url() == good


def test_a_cache_url_is_checked_like_redis_url(monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_URL", "redis:///3")
    with pytest.raises(config.StartupError, match="KERNELLAB_CACHE_URL must name a host"):
        config.cache_settings(f"{REDIS}/9")
    monkeypatch.setenv("KERNELLAB_CACHE_URL", f"{REDIS}/15")
    assert config.cache_settings(f"{REDIS}/9")["default"]["LOCATION"] == f"{REDIS}/15"
    monkeypatch.delenv("KERNELLAB_CACHE_URL")
    assert config.cache_settings(f"{REDIS}/9")["default"]["LOCATION"] == f"{REDIS}/10"


# ---- 1. the cache database must exist ------------------------------------------------------------------------

@pytest.mark.django_db
def test_check_services_stops_on_a_derived_cache_database_redis_does_not_have(local_redis, settings, monkeypatch):
    monkeypatch.delenv("KERNELLAB_CACHE_URL", raising=False)
    settings.KERNELLAB_REDIS_URL = f"{local_redis}/15"
    settings.CACHES = config.cache_settings(settings.KERNELLAB_REDIS_URL)
    assert settings.CACHES["default"]["LOCATION"] == f"{local_redis}/16"
    with pytest.raises(config.StartupError) as caught:
        config.check_services()
    assert str(caught.value) == (
        "REDIS_URL's database 15 leaves no database 16 for the cache (Redis at 127.0.0.1:6379 has 16: 0-15); set "
        "KERNELLAB_CACHE_URL to a Redis database of its own, or use a lower database number in REDIS_URL.")


@pytest.mark.django_db
def test_check_services_names_a_cache_url_that_does_not_answer(local_redis, settings, monkeypatch):
    monkeypatch.setenv("KERNELLAB_CACHE_URL", f"{local_redis}/99")
    settings.KERNELLAB_REDIS_URL = f"{local_redis}/15"
    settings.CACHES = config.cache_settings(settings.KERNELLAB_REDIS_URL)
    with pytest.raises(config.StartupError) as caught:
        config.check_services()
    assert str(caught.value) == ("KERNELLAB_CACHE_URL: cannot reach the cache at 127.0.0.1:6379/99 "
                                 "(DB index is out of range).")
    monkeypatch.setenv("KERNELLAB_CACHE_URL", f"{local_redis}/15")
    settings.CACHES = config.cache_settings(settings.KERNELLAB_REDIS_URL)
    config.check_services()  # a cache database that exists: start-up goes on


def test_serve_stops_on_redis_database_15_without_a_cache_url(local_redis, tmp_path):
    result = manage(["serve", "--no-worker", "--port", "0"], {"REDIS_URL": f"{local_redis}/15"}, tmp_path)
    assert result.returncode != 0
    assert "REDIS_URL's database 15 leaves no database 16 for the cache" in result.stderr
    assert "KERNELLAB_CACHE_URL" in result.stderr and "Traceback" not in result.stderr


def test_check_deploy_reports_a_cache_that_does_not_answer(local_redis, tmp_path):
    result = manage(["check", "--deploy", "--fail-level", "ERROR"], {"REDIS_URL": f"{local_redis}/15"}, tmp_path)
    assert result.returncode != 0
    assert "kernellab.E002" in result.stderr
    assert "REDIS_URL's database 15 leaves no database 16 for the cache" in result.stderr
    answered = manage(["check", "--deploy", "--fail-level", "ERROR"],
                      {"REDIS_URL": f"{local_redis}/15", "KERNELLAB_CACHE_URL": f"{local_redis}/15"}, tmp_path)
    assert "kernellab.E002" not in answered.stdout + answered.stderr


# ---- 8. nan, inf and KERNELLAB_WARM_START -----------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_env_float_refuses_what_is_not_a_finite_number(monkeypatch, value):
    monkeypatch.setenv("KERNELLAB_POLL_INTERVAL_S", value)
    with pytest.raises(config.StartupError) as caught:
        config.env_float("KERNELLAB_POLL_INTERVAL_S", 0.3, minimum=0.05)
    assert str(caught.value) == f"KERNELLAB_POLL_INTERVAL_S must be a number, not {value!r}."


@pytest.mark.parametrize("variable,value", [
    ("KERNELLAB_MALLOC_TRIM_S", "nan"),
    ("KERNELLAB_MALLOC_TRIM_S", "inf"),
    ("KERNELLAB_LLM_TIMEOUT_S", "nan"),
])
def test_a_float_variable_set_to_nan_or_inf_stops_check_with_one_sentence(tmp_path, variable, value):
    result = manage(["check"], {variable: value}, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"KernelLab cannot start: {variable} must be a number, not {value!r}."


def test_a_bad_warm_start_stops_check_with_one_sentence(tmp_path):
    result = manage(["check"], {"KERNELLAB_WARM_START": "maybe"}, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == ("KernelLab cannot start: KERNELLAB_WARM_START must be one of 1/0, true/false, "
                                     "yes/no or on/off, not 'maybe'.")


def test_a_web_process_reads_warm_start_as_a_boolean(tmp_path):
    """`false` used to mean "on" (only "0" was off), and a bad value reached the web process unchecked."""
    probe = ("import kernellab.warmup as w; calls = []; w.warm_process = lambda: calls.append(1); "
             "import kernellab.asgi; print('warmed' if calls else 'cold')")
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "REDIS_URL"} and not k.startswith("KERNELLAB_")}
    env.update({"KERNELLAB_DATA_DIR": str(tmp_path), "KERNELLAB_MALLOC_TRIM_S": "0"})
    for value, expected in (("false", "cold"), ("off", "cold"), ("0", "cold"), ("yes", "warmed")):
        result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**env, "KERNELLAB_WARM_START": value},
                                capture_output=True, text=True, timeout=300)
        assert result.stdout.strip() == expected, (value, result.stderr[-2000:])
    bad = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**env, "KERNELLAB_WARM_START": "maybe"},
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "KernelLab cannot start: KERNELLAB_WARM_START must be one of" in bad.stderr
