"""The live tree: one websocket per run, sending every change after the client's sequence number.

The database is the truth. With Redis, changes are also pushed at once through the channel layer;
a push that skips ahead of what this client has seen is filled from the database, and one it has
already seen is dropped, so a client never misses or repeats a change."""
from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from kernellab.selectors.runs import run_changes_after, run_for_user
from kernellab.services.changes import run_group_name

BATCH = 500
LARGEST_SEQ = 2**62  # beyond any run's change count, within a bigint
SUBSCRIBE_HINT = 'Send {"type": "subscribe", "after": <the last change number you have>}.'


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.user = self.scope.get("user")
        self.last_seq = None
        self.lock = asyncio.Lock()
        self.poller = None
        if not self.user or not self.user.is_authenticated:
            await self.close(code=4401)
            return
        run = await database_sync_to_async(run_for_user)(run_id=self.run_id, user=self.user)
        if run is None:
            await self.close(code=4403)
            return
        self.group = run_group_name(self.run_id)
        if settings.KERNELLAB_REDIS_URL:
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.poller:
            self.poller.cancel()
        if settings.KERNELLAB_REDIS_URL and getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs) -> None:
        """A frame that is not a JSON object gets a sentence back; the socket stays open."""
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
            self.last_seq = after
            await self._catch_up()
        if not settings.KERNELLAB_REDIS_URL and self.poller is None:
            self.poller = asyncio.ensure_future(self._poll())

    async def _catch_up(self) -> None:
        while True:
            changes = await database_sync_to_async(run_changes_after)(run_id=self.run_id, after=self.last_seq, limit=BATCH)
            if not changes:
                return
            await self.send_json({"type": "changes", "changes": changes})
            self.last_seq = changes[-1]["seq"]
            if len(changes) < BATCH:
                return

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(settings.KERNELLAB_POLL_INTERVAL_S)
            async with self.lock:
                await self._catch_up()

    async def run_change(self, event: dict) -> None:
        change = event["change"]
        async with self.lock:
            if self.last_seq is None or change["seq"] <= self.last_seq:
                return  # not subscribed yet, or already sent
            if change["seq"] == self.last_seq + 1:
                await self.send_json({"type": "changes", "changes": [change]})
                self.last_seq = change["seq"]
            else:
                await self._catch_up()
