"""The live tree: one websocket per run, sending every change after the client's sequence number.

The database is the truth. With Redis, changes are also pushed at once through the channel layer;
a push that skips ahead of what this client has seen is filled from the database, and one it has
already seen is dropped, so a client never misses or repeats a change.

Access is not only checked on connect: a socket lives for hours, and in that time its user may be
removed from the workspace, log out or change their password. Before it sends anything it asks
again (`socket_access_holds`): on every subscribe, which replays history, always; before pushing
changes (polled or pushed through the channel layer), when the last answer is older than
ACCESS_RECHECK_S; and at once when told through the channel layer that the user's access may have changed
(services.changes.access_changed: a membership removed, an account changed or deleted, a logout). Once access is
gone the socket is closed with 4403 and sends nothing more."""
from __future__ import annotations

import asyncio
import time
from importlib import import_module

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.core.exceptions import ValidationError
from django.utils.crypto import constant_time_compare

from kernellab.selectors.runs import run_changes_after, run_for_user
from kernellab.services.changes import run_group_name, user_group_name

BATCH = 500
LARGEST_SEQ = 2**62  # beyond any run's change count, within a bigint
SUBSCRIBE_HINT = 'Send {"type": "subscribe", "after": <the last change number you have>}.'
CLOSE_NOT_LOGGED_IN = 4401
CLOSE_NO_ACCESS = 4403
# How long a "yes, still allowed" is trusted before a push asks the database again. Asking costs a
# session read, a user read and a membership read; a run pushes many changes a second to every
# viewer and the poller wakes every KERNELLAB_POLL_INTERVAL_S, so asking on every change would
# multiply the database work of the live tree. A few seconds bound how long a removed or logged-out
# user can keep receiving live changes; a subscribe (a replay of the whole history) never reuses it.
ACCESS_RECHECK_S = 3.0


def session_user(session_key: str | None):
    """The active user that `session_key` is still logged in as, or None: the session was ended
    (logout, expiry), names another user or a backend no longer configured, or its auth hash no
    longer matches the user's (the password changed). Read as django.contrib.auth.get_user reads a
    request's session, but without its side effects (flushing or re-keying a session the browser
    still holds the cookie of)."""
    if not session_key:
        return None
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    try:
        user_id = get_user_model()._meta.pk.to_python(session[SESSION_KEY])
        backend_path = session[BACKEND_SESSION_KEY]
    except (KeyError, ValidationError):
        return None
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(user_id)  # None for a deactivated user (ModelBackend)
    if user is None:
        return None
    if hasattr(user, "get_session_auth_hash"):
        session_hash = session.get(HASH_SESSION_KEY)
        if not session_hash:
            return None
        hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
        if not any(constant_time_compare(session_hash, known) for known in hashes):
            return None
    return user


def socket_access_holds(*, session_key: str | None, user_id, run_id: int) -> bool:
    """Whether the session the socket was opened with is still logged in as the same user, and that
    user may still read the run."""
    user = session_user(session_key)
    return user is not None and user.pk == user_id and run_for_user(run_id=run_id, user=user) is not None


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.user = self.scope.get("user")
        self.last_seq = None
        self.lock = asyncio.Lock()
        self.poller = None
        self.access_lost = False
        self.access_checked_at = None
        session = self.scope.get("session")
        # No session (a stack without the session middleware): nothing to re-check access against.
        self.session_key = getattr(session, "session_key", None) if session is not None else None
        if not self.user or not self.user.is_authenticated or not self.session_key:
            await self.close(code=CLOSE_NOT_LOGGED_IN)
            return
        run = await database_sync_to_async(run_for_user)(run_id=self.run_id, user=self.user)
        if run is None:
            await self.close(code=CLOSE_NO_ACCESS)
            return
        # The auth middleware read and verified the session just now: that counts as the first check.
        self.access_checked_at = time.monotonic()
        self.group = run_group_name(self.run_id)
        if settings.KERNELLAB_REDIS_URL:
            await self.channel_layer.group_add(self.group, self.channel_name)
        # Without Redis the layer is this process's: it reaches sockets where the change was made in this process.
        self.user_group = user_group_name(self.user.pk)
        await self.channel_layer.group_add(self.user_group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.poller:
            self.poller.cancel()
        if settings.KERNELLAB_REDIS_URL and getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        if getattr(self, "user_group", None):
            await self.channel_layer.group_discard(self.user_group, self.channel_name)

    async def _access_holds(self, *, fresh: bool = False) -> bool:
        """Whether this socket may still send changes; a `yes` is reused for ACCESS_RECHECK_S unless `fresh`."""
        if self.access_lost:
            return False
        started = time.monotonic()
        if not fresh and self.access_checked_at is not None and started - self.access_checked_at < ACCESS_RECHECK_S:
            return True
        holds = await database_sync_to_async(socket_access_holds)(
            session_key=self.session_key, user_id=self.user.pk, run_id=self.run_id
        )
        if holds:
            self.access_checked_at = started  # counted from before the read: never trusted longer than promised
        return holds

    async def _close_for_lost_access(self) -> None:
        """Access is gone: stop polling and pushing, and close with 4403 (the browser shows why)."""
        if self.access_lost:
            return
        self.access_lost = True
        if self.poller is not None and self.poller is not asyncio.current_task():
            self.poller.cancel()
        if settings.KERNELLAB_REDIS_URL and getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        await self.close(code=CLOSE_NO_ACCESS)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs) -> None:
        """A frame that is not a JSON object gets a sentence back; the socket stays open."""
        if self.access_lost:
            return
        if text_data is None:
            await self.send_error("Send text frames holding JSON, not binary ones.")
            return
        try:
            content = await self.decode_json(text_data)
        except ValueError:
            await self.send_error(f"That message is not JSON. {SUBSCRIBE_HINT}")
            return
        if not isinstance(content, dict):
            await self.send_error(f"A message must be a JSON object. {SUBSCRIBE_HINT}")
            return
        await self.receive_json(content, **kwargs)

    async def send_error(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})

    async def receive_json(self, content: dict, **kwargs) -> None:
        if content.get("type") != "subscribe":
            await self.send_error(f"Unknown message type {str(content.get('type'))[:40]!r}. {SUBSCRIBE_HINT}")
            return
        try:
            after = min(max(0, int(content.get("after", 0))), LARGEST_SEQ)
        except (TypeError, ValueError, OverflowError):
            after = 0
        async with self.lock:
            # A subscribe replays history from the database: always asked afresh, never from the cache.
            if not await self._access_holds(fresh=True):
                await self._close_for_lost_access()
                return
            self.last_seq = after
            await self._catch_up()
        if not settings.KERNELLAB_REDIS_URL and self.poller is None and not self.access_lost:
            self.poller = asyncio.ensure_future(self._poll())

    async def _send_changes(self, changes: list[dict]) -> bool:
        """Sends `changes` if access still holds (asked again once the last answer is old); False once closed."""
        if not await self._access_holds():
            await self._close_for_lost_access()
            return False
        await self.send_json({"type": "changes", "changes": changes})
        self.last_seq = changes[-1]["seq"]
        return True

    async def _catch_up(self) -> None:
        while not self.access_lost:
            changes = await database_sync_to_async(run_changes_after)(run_id=self.run_id, after=self.last_seq, limit=BATCH)
            if not changes or not await self._send_changes(changes) or len(changes) < BATCH:
                return

    async def _poll(self) -> None:
        while not self.access_lost:
            await asyncio.sleep(settings.KERNELLAB_POLL_INTERVAL_S)
            async with self.lock:
                await self._catch_up()

    async def access_changed(self, event: dict) -> None:
        """The user's access may have changed: asked afresh now, not when the last answer grows old."""
        async with self.lock:
            if self.access_lost:
                return
            self.access_checked_at = None
            if not await self._access_holds(fresh=True):
                await self._close_for_lost_access()

    async def run_change(self, event: dict) -> None:
        """A change pushed through the channel layer: forwarded only while access holds."""
        change = event["change"]
        async with self.lock:
            if self.access_lost or self.last_seq is None or change["seq"] <= self.last_seq:
                return  # closed, not subscribed yet, or already sent
            if change["seq"] == self.last_seq + 1:
                await self._send_changes([change])
            else:
                await self._catch_up()
