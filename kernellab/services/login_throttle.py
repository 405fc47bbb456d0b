"""Login throttling: after too many failed log-ins for one user name from one address, refuse for a while.

A user name is counted as log-in reads it: stripped and NFKC-normalised (Django's UsernameField and the user
model's normalize_username), then casefolded, so that every spelling that logs in as one account (fullwidth
letters, `ª`, superscripts), and every one that differs from it only in capitals, uses that account's one counter.

Counts live in Django's cache: the default per-process memory cache, or a shared one where CACHES
names it, so that a web tier of several processes counts together.

A cache that cannot be reached (Redis down) does not block logging in: the throttle fails open, allowing the
attempt without counting it, and logs a warning (once per process until the cache answers again).
"""
from __future__ import annotations

import hashlib
import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache

from kernellab.services.errors import ServiceError


log = logging.getLogger(__name__)


class LoginThrottled(ServiceError):
    pass


def _cache_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError]  # builtin ConnectionError, TimeoutError, socket errors
    try:
        from redis.exceptions import RedisError
    except ImportError:
        pass
    else:
        errors.append(RedisError)
    return tuple(errors)


CACHE_ERRORS = _cache_errors()
_warned = False


def _cache_failed(exc: BaseException) -> None:
    """Log, once until the cache works again, that log-ins are not throttled."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("The cache cannot be reached (%s: %s); log-ins are not throttled until it is back.",
                    type(exc).__name__, exc)


def _cache_ok() -> None:
    global _warned
    if _warned:
        _warned = False
        log.info("The cache answers again; log-ins are throttled again.")


def _counted_name(username: str) -> str:
    """The name as log-in compares it (stripped, then NFKC like UsernameField), casefolded: one counter per account."""
    return get_user_model().normalize_username(username.strip()).strip().casefold()


def _key(*, username: str, address: str) -> str:
    digest = hashlib.sha256(f"{_counted_name(username)}\0{address}".encode()).hexdigest()
    return f"kernellab:login-failures:{digest}"


def login_throttle_check(*, username: str, address: str) -> None:
    """Raise LoginThrottled when this user name from this address has used up its failed attempts."""
    try:
        failures = cache.get(_key(username=username, address=address), 0)
    except CACHE_ERRORS as exc:
        _cache_failed(exc)
        return
    _cache_ok()
    if failures >= settings.KERNELLAB_LOGIN_MAX_FAILURES:
        minutes = max(1, round(settings.KERNELLAB_LOGIN_LOCKOUT_S / 60))
        raise LoginThrottled(f"Too many failed log-ins for this user name from your address; "
                             f"try again in {minutes} minute{'s' if minutes != 1 else ''}.")


def login_failure_record(*, username: str, address: str) -> int:
    """Count one failed attempt; the window starts at the first failure and lasts KERNELLAB_LOGIN_LOCKOUT_S.
    0 where the cache cannot be reached (the attempt is not counted)."""
    key = _key(username=username, address=address)
    try:
        cache.add(key, 0, timeout=settings.KERNELLAB_LOGIN_LOCKOUT_S)
        try:
            return cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.KERNELLAB_LOGIN_LOCKOUT_S)
            return 1
    except CACHE_ERRORS as exc:
        _cache_failed(exc)
        return 0


def login_failures_clear(*, username: str, address: str) -> None:
    try:
        cache.delete(_key(username=username, address=address))
    except CACHE_ERRORS as exc:
        _cache_failed(exc)
