"""The live tree socket: membership on connect, catch-up after N, no gaps or repeats, Redis pushes."""
import asyncio
import os

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from kernellab.routing import websocket_urlpatterns
from kernellab.services.changes import change_record

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_available() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except Exception:
        return False


@pytest.fixture(params=["database", "redis"])
def layer(request, settings):
    from channels.layers import channel_layers

    if request.param == "redis":
        if not redis_available():
            pytest.skip(f"Redis is not reachable at {REDIS_URL}")
        settings.KERNELLAB_REDIS_URL = REDIS_URL
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
    else:
        settings.KERNELLAB_REDIS_URL = None
        settings.KERNELLAB_POLL_INTERVAL_S = 0.05
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield request.param
    channel_layers.backends.clear()


def communicator_for(run, user):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run.pk}/")
    communicator.scope["user"] = user
    return communicator


async def receive_seqs(communicator, until: int, timeout: float = 5.0) -> list[int]:
    seqs: list[int] = []
    loop = asyncio.get_event_loop()
    deadline = loop.time() + timeout
    while not seqs or seqs[-1] < until:
        message = await communicator.receive_json_from(timeout=max(0.1, deadline - loop.time()))
        seqs.extend(change["seq"] for change in message["changes"])
    return seqs


@database_sync_to_async
def record(run, count: int) -> int:
    for i in range(count):
        change_record(run=run, kind="node", payload={"i": i})
    run.refresh_from_db()
    return run.change_seq


async def test_a_member_catches_up_and_then_gets_live_changes(layer, run, members):
    first = await record(run, 3)
    communicator = communicator_for(run, members["viewer"])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, first) == list(range(1, first + 1))
    last = await record(run, 5)
    seqs = await receive_seqs(communicator, last)
    assert seqs == list(range(first + 1, last + 1))
    await communicator.disconnect()


async def test_a_reconnecting_client_gets_exactly_what_it_missed(layer, run, members):
    start = await record(run, 2)
    communicator = communicator_for(run, members["viewer"])
    await communicator.connect()
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    seen = await receive_seqs(communicator, start)
    await communicator.disconnect()  # the connection drops ...
    end = await record(run, 7)  # ... while the tree keeps growing
    again = communicator_for(run, members["viewer"])
    await again.connect()
    await again.send_json_to({"type": "subscribe", "after": seen[-1]})
    missed = await receive_seqs(again, end)
    assert missed == list(range(seen[-1] + 1, end + 1))
    assert await again.receive_nothing(timeout=0.3)
    await again.disconnect()


async def test_an_outsider_is_refused_on_connect(layer, run, members):
    communicator = communicator_for(run, members["outsider"])
    connected, code = await communicator.connect()
    assert not connected and code == 4403


async def test_an_anonymous_user_is_refused_on_connect(layer, run):
    from django.contrib.auth.models import AnonymousUser

    communicator = communicator_for(run, AnonymousUser())
    connected, code = await communicator.connect()
    assert not connected and code == 4401


@pytest.mark.parametrize("frame", ["{not json", "[1, 2]", '{"type": "dance"}'])
async def test_a_bad_frame_gets_a_sentence_and_the_socket_stays_open(layer, run, members, frame):
    last = await record(run, 2)
    communicator = communicator_for(run, members["viewer"])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_to(text_data=frame)
    answer = await communicator.receive_json_from(timeout=5)
    assert answer["type"] == "error"
    assert 'Send {"type": "subscribe"' in answer["message"] and "Traceback" not in answer["message"]
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))
    await communicator.disconnect()


async def test_a_binary_frame_or_an_absurd_position_does_not_close_the_socket(layer, run, members):
    last = await record(run, 1)
    communicator = communicator_for(run, members["viewer"])
    await communicator.connect()
    await communicator.send_to(bytes_data=b"\x00\x01")
    assert (await communicator.receive_json_from(timeout=5)) == {"type": "error", "message": "Send text frames holding JSON, not binary ones."}
    await communicator.send_to(text_data='{"type": "subscribe", "after": 1e400}')  # infinity: start from the beginning
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))
    await communicator.send_json_to({"type": "subscribe", "after": 10**40})  # beyond any run: nothing to send
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()
