"""The live tree socket: membership on connect, catch-up after N, no gaps or repeats, Redis pushes;
access re-checked while the socket is open (removal, logout, a changed password close it with 4403)."""
import asyncio
import os

import pytest
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from kernellab import consumers
from kernellab.channel_layer import redis_channel_layer
from kernellab.models import Membership
from kernellab.routing import websocket_urlpatterns
from kernellab.services.changes import change_record
from kernellab.services.memberships import membership_remove

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_available() -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping())
    except Exception:
        return False


@pytest.fixture(params=["database", "pushed", "redis"])
def layer(request, settings):
    from channels.layers import channel_layers

    if request.param == "pushed":
        # The push path (group messages, no polling) through the in-memory layer: the URL only
        # switches the consumer and `_push` to pushing; nothing connects to it.
        settings.KERNELLAB_REDIS_URL = "redis://pushed-through-the-in-memory-layer"
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    elif request.param == "redis":
        if not redis_available():
            pytest.skip(f"Redis is not reachable at {REDIS_URL}")
        settings.KERNELLAB_REDIS_URL = REDIS_URL
        settings.CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}  # the settings' own
    else:
        settings.KERNELLAB_REDIS_URL = None
        settings.KERNELLAB_POLL_INTERVAL_S = 0.05
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.clear()
    yield request.param
    channel_layers.backends.clear()


@database_sync_to_async
def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


async def communicator_for(run, user=None):
    """A socket through the same session and auth middleware as kernellab/asgi.py, logged in as
    `user` (a session cookie of its own; `.client` logs it out) or anonymous."""
    headers = []
    client = None
    if user is not None:
        client = await logged_in(user)
        headers = [(b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}".encode())]
    communicator = WebsocketCommunicator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)), f"/ws/runs/{run.pk}/", headers=headers)
    communicator.client = client
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
    communicator = await communicator_for(run, members["viewer"])
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
    communicator = await communicator_for(run, members["viewer"])
    await communicator.connect()
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    seen = await receive_seqs(communicator, start)
    await communicator.disconnect()  # the connection drops ...
    end = await record(run, 7)  # ... while the tree keeps growing
    again = await communicator_for(run, members["viewer"])
    await again.connect()
    await again.send_json_to({"type": "subscribe", "after": seen[-1]})
    missed = await receive_seqs(again, end)
    assert missed == list(range(seen[-1] + 1, end + 1))
    assert await again.receive_nothing(timeout=0.3)
    await again.disconnect()


async def test_an_outsider_is_refused_on_connect(layer, run, members):
    communicator = await communicator_for(run, members["outsider"])
    connected, code = await communicator.connect()
    assert not connected and code == 4403


async def test_an_anonymous_user_is_refused_on_connect(layer, run):
    communicator = await communicator_for(run)
    connected, code = await communicator.connect()
    assert not connected and code == 4401


@pytest.mark.parametrize("frame", ["{not json", "[1, 2]", '{"type": "dance"}'])
async def test_a_bad_frame_gets_a_sentence_and_the_socket_stays_open(layer, run, members, frame):
    last = await record(run, 2)
    communicator = await communicator_for(run, members["viewer"])
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
    communicator = await communicator_for(run, members["viewer"])
    await communicator.connect()
    await communicator.send_to(bytes_data=b"\x00\x01")
    assert (await communicator.receive_json_from(timeout=5)) == {"type": "error", "message": "Send text frames holding JSON, not binary ones."}
    await communicator.send_to(text_data='{"type": "subscribe", "after": 1e400}')  # infinity: start from the beginning
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))
    await communicator.send_json_to({"type": "subscribe", "after": 10**40})  # beyond any run: nothing to send
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_a_socket_without_a_session_is_refused_on_connect(layer, run, members):
    # Access is re-checked against the session while the socket is open, so a scope that has
    # none (a stack without the session middleware) cannot be let in.
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run.pk}/")
    communicator.scope["user"] = members["viewer"]
    connected, code = await communicator.connect()
    assert not connected and code == 4401


# Access re-checked while the socket is open


@database_sync_to_async
def remove(members, role: str) -> None:
    membership_remove(membership=Membership.objects.get(user=members[role]), user=members["admin"])


async def assert_closed_for_lost_access(communicator) -> None:
    """The very next thing the socket sends is its close with 4403: no change slips out before it."""
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}


@pytest.fixture
def recheck_every_time(monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 0, raising=False)


async def test_a_removed_member_is_closed_with_4403_and_gets_no_further_change(layer, run, members, recheck_every_time):
    first = await record(run, 2)
    communicator = await communicator_for(run, members["engineer"])
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, first) == list(range(1, first + 1))
    await remove(members, "engineer")
    await record(run, 3)  # the run goes on: status, nodes, speedups ...
    await assert_closed_for_lost_access(communicator)
    await record(run, 2)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_a_removed_member_cannot_replay_the_history_by_subscribing_again(layer, run, members, monkeypatch):
    # However long the answer is remembered for pushes, a subscribe (a replay from the database) asks afresh.
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 3600, raising=False)
    last = await record(run, 3)
    communicator = await communicator_for(run, members["engineer"])
    await communicator.connect()
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))
    await remove(members, "engineer")
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    await assert_closed_for_lost_access(communicator)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_a_logged_out_session_is_closed_and_gets_no_new_comment(layer, run, members, recheck_every_time):
    first = await record(run, 1)
    communicator = await communicator_for(run, members["engineer"])
    await communicator.connect()
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, first) == list(range(1, first + 1))
    await database_sync_to_async(communicator.client.logout)()  # POST /accounts/logout/ ends the session
    await database_sync_to_async(change_record)(run=run, kind="comment", payload={"node": "n1", "body": "secret"})
    await assert_closed_for_lost_access(communicator)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


@pytest.mark.parametrize("change", ["password", "deactivated"])
async def test_a_changed_password_or_a_deactivated_account_ends_the_socket(layer, run, members, change):
    await record(run, 1)
    communicator = await communicator_for(run, members["viewer"])
    await communicator.connect()

    @database_sync_to_async
    def change_account():
        if change == "password":
            # Django logs out the user's other sessions: their auth hash no longer matches.
            members["viewer"].set_password("a-brand-new-password")
        else:
            members["viewer"].is_active = False
        members["viewer"].save()

    await change_account()
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    await assert_closed_for_lost_access(communicator)
    await communicator.disconnect()


async def test_a_member_who_keeps_access_keeps_receiving(layer, run, members, recheck_every_time):
    first = await record(run, 1)
    viewer = await communicator_for(run, members["viewer"])
    engineer = await communicator_for(run, members["engineer"])
    for communicator in (viewer, engineer):
        assert (await communicator.connect())[0]
        await communicator.send_json_to({"type": "subscribe", "after": 0})
        assert await receive_seqs(communicator, first) == list(range(1, first + 1))
    await remove(members, "engineer")
    last = await record(run, 4)
    assert await receive_seqs(viewer, last) == list(range(first + 1, last + 1))
    await assert_closed_for_lost_access(engineer)
    await viewer.disconnect()
    await engineer.disconnect()


async def test_pushes_reuse_a_recent_answer_and_a_subscribe_asks_again(layer, run, members, monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 3600, raising=False)
    checks = []
    real = consumers.socket_access_holds

    def counted(**kwargs):
        checks.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(consumers, "socket_access_holds", counted)
    start = await record(run, 0)
    communicator = await communicator_for(run, members["viewer"])
    await communicator.connect()
    await communicator.send_json_to({"type": "subscribe", "after": start})
    assert await communicator.receive_nothing(timeout=0.2)
    assert len(checks) == 1  # on subscribe (on connect the auth middleware has just read the session)
    for expected in range(start + 1, start + 4):
        await record(run, 1)
        assert await receive_seqs(communicator, expected) == [expected]
    assert len(checks) == 1
    await communicator.send_json_to({"type": "subscribe", "after": start + 3})
    assert await communicator.receive_nothing(timeout=0.2)
    assert len(checks) == 2
    await communicator.disconnect()


@pytest.mark.parametrize("ending", ["removed", "deactivated", "logged-out"])
async def test_access_ended_closes_the_socket_at_once_not_when_its_answer_grows_old(layer, run, members, monkeypatch, ending):
    """The user's sockets are told through the channel layer (Redis, or this process's own layer without it): however
    long a 'yes' is remembered, the socket closes with 4403 before the run's next change, not within seconds of it."""
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 3600, raising=False)
    last = await record(run, 2)
    communicator = await communicator_for(run, members["engineer"])
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))

    @database_sync_to_async
    def end_access():
        if ending == "removed":
            membership_remove(membership=Membership.objects.get(user=members["engineer"]), user=members["admin"])
        elif ending == "deactivated":
            members["engineer"].is_active = False
            members["engineer"].save()
        else:
            communicator.client.logout()

    await end_access()
    await assert_closed_for_lost_access(communicator)  # no change was recorded: only the access message woke it
    await record(run, 2)
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_someone_elses_access_change_leaves_a_socket_open(layer, run, members, monkeypatch):
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_S", 3600, raising=False)
    communicator = await communicator_for(run, members["viewer"])
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"type": "subscribe", "after": 0})
    await remove(members, "engineer")
    last = await record(run, 2)
    assert await receive_seqs(communicator, last) == list(range(1, last + 1))
    await communicator.disconnect()


async def test_an_idle_socket_outlives_the_redis_clients_read_timeout(settings):
    """A socket of an idle run waits on the layer longer than redis-py's 5 s default read timeout: the wait ends by
    itself (the test's limit), not with redis.exceptions.TimeoutError, which dropped every idle socket every 5 s."""
    from channels.layers import channel_layers, get_channel_layer

    if not redis_available():
        pytest.skip(f"Redis is not reachable at {REDIS_URL}")
    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}
    channel_layers.backends.clear()
    try:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(layer.receive(channel), timeout=7)
        await layer.send(channel, {"type": "still.here"})
        assert (await asyncio.wait_for(layer.receive(channel), timeout=5))["type"] == "still.here"
    finally:
        await get_channel_layer().flush()
        channel_layers.backends.clear()
