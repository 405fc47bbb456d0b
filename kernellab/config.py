"""Settings read from the environment, each checked with a sentence that names the variable.

Everything has an embedded default so that KernelLab runs with no configuration at all:
SQLite in the data folder, Celery over a filesystem broker with a local worker, and websocket
updates fed from the database.
"""
from __future__ import annotations

import math
import os
import re
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


class StartupError(Exception):
    """A setting that stops start-up; the message is one sentence naming the variable."""


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise StartupError(f"{name} must be one of 1/0, true/false, yes/no or on/off, not {raw!r}.")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise StartupError(f"{name} must be a whole number, not {raw!r}.") from None
    if value < minimum:
        raise StartupError(f"{name} must be at least {minimum}, not {value}.")
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise StartupError(f"{name} must be a number, not {raw!r}.") from None
    if not math.isfinite(value):  # float() takes nan and inf, which no interval, timeout or sleep can use
        raise StartupError(f"{name} must be a number, not {raw!r}.")
    if value < minimum:
        raise StartupError(f"{name} must be at least {minimum}, not {value}.")
    return value


def data_dir() -> Path:
    """The data folder, readable only by its owner: it holds the SQLite database (sessions, password hashes),
    the secret key and every team's datasets and reports. A new one is made 0700; an existing one this user
    owns that others can read or enter is tightened to 0700, with a line saying so."""
    path = Path(os.environ.get("KERNELLAB_DATA_DIR", BASE_DIR / "data"))
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = path.stat()
        if status.st_mode & 0o077 and status.st_uid == os.geteuid():
            path.chmod(0o700)
            sys.stderr.write(f"KernelLab made its data folder {str(path)!r} readable only by its owner "
                             f"(mode {stat.S_IMODE(status.st_mode):o} to 700).\n")
    except OSError as exc:
        raise StartupError(f"KERNELLAB_DATA_DIR {str(path)!r} cannot be created ({exc.strerror}).") from None
    return path


def database_settings(data: Path) -> dict:
    raw = os.environ.get("DATABASE_URL", "").strip()
    if not raw:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(data / "kernellab.sqlite3"),
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"},
        }
    import dj_database_url

    parsed = urlparse(raw)
    if parsed.scheme not in {"postgres", "postgresql", "sqlite"}:
        raise StartupError(
            f"DATABASE_URL must start with postgresql:// (or sqlite:///), not {parsed.scheme or 'nothing'!r}."
        )
    if parsed.scheme.startswith("postgres") and not (parsed.path.strip("/") and (parsed.hostname or "host=" in raw)):
        raise StartupError("DATABASE_URL must name a host and a database, as in postgresql://user@host:5432/name.")
    try:
        parsed.port
    except ValueError:
        raise StartupError("DATABASE_URL has a port that is not a number.") from None
    pool = database_pool() if parsed.scheme.startswith("postgres") else None
    try:
        # A pool hands each request a connection and takes it back at the end; without one, keep
        # a connection per thread for a minute.
        config = dj_database_url.parse(raw, conn_max_age=0 if pool else 60)
    except Exception as exc:  # dj_database_url raises several types for malformed addresses
        raise StartupError(f"DATABASE_URL is malformed ({exc}).") from None
    if pool:
        config.setdefault("OPTIONS", {})["pool"] = pool
    return config


def database_pool() -> dict | None:
    """PostgreSQL pool sizes per process: the web tier serves every request and websocket from a
    few shared connections instead of one per thread. KERNELLAB_DB_POOL_MAX=0 turns pooling off."""
    largest = env_int("KERNELLAB_DB_POOL_MAX", 8, minimum=0)
    if largest == 0:
        return None
    smallest = env_int("KERNELLAB_DB_POOL_MIN", min(2, largest), minimum=0)
    if smallest > largest:
        raise StartupError(f"KERNELLAB_DB_POOL_MIN ({smallest}) must not exceed KERNELLAB_DB_POOL_MAX ({largest}).")
    return {
        "min_size": smallest,
        "max_size": largest,
        # How long a request waits for a free connection before it fails with an error.
        "timeout": env_float("KERNELLAB_DB_POOL_TIMEOUT_S", 10.0, minimum=0.1),
        # Connections above min_size that stay unused this long are closed.
        "max_idle": env_float("KERNELLAB_DB_POOL_IDLE_S", 60.0, minimum=1.0),
    }


def _redis_database(variable: str, raw: str) -> int:
    """The database number of a redis:// address (0 where it names none), checked with a sentence naming `variable`:
    redis-py would quietly use database 0 for a path that is not a number, and the Celery worker stop with a
    traceback."""
    parsed = urlparse(raw)
    if parsed.scheme not in {"redis", "rediss"}:
        raise StartupError(f"{variable} must start with redis:// or rediss://, not {parsed.scheme or 'nothing'!r}.")
    try:
        parsed.port
    except ValueError:
        raise StartupError(f"{variable} has a port that is not a number.") from None
    if not parsed.hostname:
        raise StartupError(f"{variable} must name a host, as in redis://127.0.0.1:6379/0.")
    number = parsed.path.strip("/")
    if number and not (number.isascii() and number.isdigit()):
        raise StartupError(f"{variable}'s database must be a whole number, as in redis://127.0.0.1:6379/0, "
                           f"not {number!r}.")
    return int(number or 0)


def redis_url() -> str | None:
    raw = os.environ.get("REDIS_URL", "").strip()
    if not raw:
        return None
    _redis_database("REDIS_URL", raw)
    return raw


def cache_settings(redis: str | None) -> dict:
    """Django's cache: where Redis is configured, one cache for every web process (login failures
    count together, and a highlighted kernel is rendered once for all of them), in a Redis database of
    its own so that clearing it leaves the broker and channel layer alone (KERNELLAB_CACHE_URL names
    another; by default the next database number on REDIS_URL's server, which must exist: check_services
    and `check --deploy` ask the server, see cache_problem). Without Redis, a bounded memory cache in the one
    web process."""
    if not redis:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "OPTIONS": {"MAX_ENTRIES": 256}}}
    location = os.environ.get("KERNELLAB_CACHE_URL", "").strip()
    if location:
        _redis_database("KERNELLAB_CACHE_URL", location)
    else:
        number = _redis_database("REDIS_URL", redis)
        location = urlparse(redis)._replace(path=f"/{number + 1}").geturl()
    return {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": location,
                        "KEY_PREFIX": "kernellab", "TIMEOUT": 24 * 3600}}


def _redis_database_count(url: str) -> int | None:
    """How many databases the Redis server at `url` has (CONFIG GET databases), or None where it will not say."""
    import redis

    try:
        answer = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3).config_get("databases")
        return int(answer.get("databases"))
    except Exception:  # CONFIG may be renamed or forbidden (managed Redis): the count is then left unsaid
        return None


def cache_problem() -> str | None:
    """Why Django's cache (settings.CACHES, Redis in the team setup) cannot be used, as one sentence naming the
    variable to fix; None when it answers or is the in-process memory cache. A cache that does not answer turns
    login throttling off (services/login_throttle.py fails open), so start-up must say so rather than the first
    failed log-in: REDIS_URL on a server's last database (15 of 16) derives a cache database that does not exist."""
    from django.conf import settings

    cache = settings.CACHES.get("default") or {}
    if not cache.get("BACKEND", "").endswith("RedisCache"):
        return None
    location = cache.get("LOCATION")
    location = location[0] if isinstance(location, (list, tuple)) else str(location or "")
    explicit = bool(os.environ.get("KERNELLAB_CACHE_URL", "").strip())
    parsed = urlparse(location)
    where = f"{parsed.hostname}:{parsed.port or 6379}"
    problem = _reachable(parsed.hostname or "127.0.0.1", parsed.port or 6379)
    if problem is None:
        import redis

        try:
            redis.Redis.from_url(location, socket_connect_timeout=3, socket_timeout=3).ping()
        except Exception as exc:
            problem = str(exc).strip() or type(exc).__name__
    if problem is None:
        return None
    database = parsed.path.strip("/") or "0"
    if not explicit and "DB index is out of range" in problem:
        count = _redis_database_count(parsed._replace(path="/0").geturl())
        has = f"Redis at {where} has {count}: 0-{count - 1}" if count else f"Redis at {where}: {problem}"
        return (f"REDIS_URL's database {int(database) - 1} leaves no database {database} for the cache ({has}); set "
                f"KERNELLAB_CACHE_URL to a Redis database of its own, or use a lower database number in REDIS_URL.")
    if explicit:
        return f"KERNELLAB_CACHE_URL: cannot reach the cache at {where}/{database} ({problem})."
    return (f"REDIS_URL: cannot reach the cache in the next database, {where}/{database} ({problem}); set "
            f"KERNELLAB_CACHE_URL to a Redis database of its own.")


def allowed_hosts() -> list[str]:
    raw = os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver")
    hosts = [h.strip() for h in raw.split(",") if h.strip()]
    for host in hosts:
        if not re.fullmatch(r"[\w.\-\[\]:*]+", host):
            raise StartupError(f"ALLOWED_HOSTS holds {host!r}, which is not a host name.")
    return hosts


# What `manage.py check --deploy` asks of a production key (security.W009).
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_DISTINCT = 5
SECRET_KEY_RECIPE = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"


def secret_key(debug: bool, data: Path) -> str:
    raw = os.environ.get("SECRET_KEY")
    if raw:
        if not debug and (len(raw) < SECRET_KEY_MIN_LENGTH or len(set(raw)) < SECRET_KEY_MIN_DISTINCT
                          or raw.startswith("django-insecure-")):
            raise StartupError(
                f"SECRET_KEY must be at least {SECRET_KEY_MIN_LENGTH} characters long, with at least "
                f"{SECRET_KEY_MIN_DISTINCT} different ones and not starting with 'django-insecure-', when DEBUG is "
                f"off; make one with {SECRET_KEY_RECIPE}.")
        return raw
    # Without a configured key, keep one per data folder so sessions survive restarts.
    key_file = data / "secret_key"
    if not key_file.exists():
        from secrets import token_urlsafe

        key_file.write_text(token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


def _one_of(values) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}"


def runner_backend() -> str:
    """KERNELLAB_RUNNER_BACKEND: the backend a run set to `auto` measures with, one of those gpu_runner's
    Runner accepts (its backends, or `auto`: a GPU -> cupy, else replay where there are records, else static)."""
    from gpu_runner.runner import BACKENDS

    raw = os.environ.get("KERNELLAB_RUNNER_BACKEND", "")
    value = raw.strip().lower() or "auto"
    allowed = ("auto", *BACKENDS)
    if value not in allowed:
        raise StartupError(f"KERNELLAB_RUNNER_BACKEND must be {_one_of(allowed)}, not {raw!r}.")
    return value


# What gpu_runner.nvrtc.choose_engine accepts (it reads the variable itself at every compile; checking it here
# stops start-up on a bad value instead of failing the first compile). tests/kernellab/test_config_variables.py
# checks that nvrtc accepts exactly these.
COMPILE_ENGINES = ("auto", "nvcc")


def compile_engine() -> str:
    """KERNELLAB_COMPILE_ENGINE, normalised as gpu_runner.nvrtc reads it."""
    raw = os.environ.get("KERNELLAB_COMPILE_ENGINE", "")
    value = raw.strip().lower() or "auto"
    if value not in COMPILE_ENGINES:
        raise StartupError(f"KERNELLAB_COMPILE_ENGINE must be {_one_of(COMPILE_ENGINES)}, not {raw!r}.")
    return value


def warm_start() -> bool:
    """KERNELLAB_WARM_START: whether each web process warms before its first request (kernellab/asgi.py)."""
    return env_bool("KERNELLAB_WARM_START", True)


def web_processes() -> int:
    """KERNELLAB_WEB_PROCESSES: daphne processes `manage.py serve` starts (its --web-processes wins)."""
    return env_int("KERNELLAB_WEB_PROCESSES", 1, minimum=1)


@dataclass(frozen=True)
class LLMEndpoint:
    base_url: str | None
    api_key: str | None
    surrogate_model: str | None
    generator_model: str | None
    timeout_s: float = 120.0
    max_retries: int = 3
    call_budget: int = 500  # LLM calls one run may make, generator and surrogate together
    max_answer_chars: int = 256 * 1024

    @property
    def configured(self) -> bool:
        return bool(self.base_url or self.api_key)


def llm_endpoint() -> LLMEndpoint:
    base_url = os.environ.get("OPENAI_BASE_URL", "").strip() or None
    if base_url:
        parsed = urlparse(base_url)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            from search_engine.llm_client import redact_url  # (only here: the module imports the OpenAI client)

            raise StartupError(f"OPENAI_BASE_URL must be an http(s) address, as in http://127.0.0.1:8080/v1, "
                               f"not {redact_url(base_url)!r}.")
    return LLMEndpoint(
        base_url=base_url,
        api_key=os.environ.get("OPENAI_API_KEY", "").strip() or None,
        surrogate_model=os.environ.get("KERNELLAB_SURROGATE_MODEL", "").strip() or None,
        generator_model=os.environ.get("KERNELLAB_GENERATOR_MODEL", "").strip() or None,
        timeout_s=env_float("KERNELLAB_LLM_TIMEOUT_S", 120.0, minimum=0.1),
        max_retries=env_int("KERNELLAB_LLM_RETRIES", 3),
        call_budget=env_int("KERNELLAB_LLM_CALL_BUDGET", 500, minimum=1),
        max_answer_chars=env_int("KERNELLAB_LLM_MAX_ANSWER_KB", 256, minimum=1) * 1024,
    )


def _reachable(host: str, port: int, timeout: float = 3.0) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def _database_error_text(exc: BaseException) -> str:
    """The cause a database error names, on one line: its first line, or where that only announces a list (psycopg's
    "Multiple connection attempts failed. All failures were:"), the list; without libpq's hints."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Is the server running", "HINT:"))]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return " ".join(lines)
    return lines[0]


# How long start-up's own PostgreSQL connection waits for the server (a pool waits its own timeout, 10 s by
# default, and then names only that timeout, not why no connection came).
CHECK_CONNECT_TIMEOUT_S = 5


def _postgres_direct_problem(connection) -> str | None:
    """One connection to PostgreSQL without the pool, with the same parameters: the reason it fails, or None."""
    import psycopg

    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "prepare_threshold"):  # Django's own, not libpq's
        params.pop(name, None)
    params.setdefault("connect_timeout", CHECK_CONNECT_TIMEOUT_S)
    try:
        psycopg.connect(**params).close()
    except psycopg.Error as exc:
        return _database_error_text(exc)
    return None


def check_services() -> None:
    """Connect to the configured database and Redis; raise StartupError with one sentence if not."""
    from django.conf import settings
    from django.db import connection

    variable = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "KERNELLAB_DATA_DIR"
    problem = None
    if connection.vendor == "postgresql":
        try:
            problem = _postgres_direct_problem(connection)
        except Exception:  # parameters psycopg refuses: left to the connection below to report
            problem = None
    if problem is None:
        try:
            connection.ensure_connection()
        except Exception as exc:
            problem = _database_error_text(exc)
    if problem is not None:
        raise StartupError(f"{variable}: cannot open the database ({problem}).")
    url = settings.KERNELLAB_REDIS_URL
    if url:
        parsed = urlparse(url)
        problem = _reachable(parsed.hostname or "127.0.0.1", parsed.port or 6379)
        if problem is None:
            import redis

            try:
                redis.Redis.from_url(url, socket_connect_timeout=3).ping()
            except Exception as exc:
                problem = str(exc)
        if problem:
            raise StartupError(f"REDIS_URL: cannot reach Redis at {parsed.hostname}:{parsed.port or 6379} ({problem}).")
    problem = cache_problem()
    if problem:
        raise StartupError(problem)
