"""Login throttling: after too many failed log-ins for one user name from one address, refuse for a while.

Counts live in Django's cache: the default per-process memory cache, or a shared one where CACHES
names it, so that a web tier of several processes counts together.
"""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.core.cache import cache

from kernellab.services.errors import ServiceError


class LoginThrottled(ServiceError):
    pass


def _key(*, username: str, address: str) -> str:
    digest = hashlib.sha256(f"{username.strip().lower()}\0{address}".encode()).hexdigest()
    return f"kernellab:login-failures:{digest}"


def login_throttle_check(*, username: str, address: str) -> None:
    """Raise LoginThrottled when this user name from this address has used up its failed attempts."""
    if cache.get(_key(username=username, address=address), 0) >= settings.KERNELLAB_LOGIN_MAX_FAILURES:
        minutes = max(1, round(settings.KERNELLAB_LOGIN_LOCKOUT_S / 60))
        raise LoginThrottled(f"Too many failed log-ins for this user name from your address; "
                             f"try again in {minutes} minute{'s' if minutes != 1 else ''}.")


def login_failure_record(*, username: str, address: str) -> int:
    """Count one failed attempt; the window starts at the first failure and lasts KERNELLAB_LOGIN_LOCKOUT_S."""
    key = _key(username=username, address=address)
    cache.add(key, 0, timeout=settings.KERNELLAB_LOGIN_LOCKOUT_S)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=settings.KERNELLAB_LOGIN_LOCKOUT_S)
        return 1


def login_failures_clear(*, username: str, address: str) -> None:
    cache.delete(_key(username=username, address=address))
