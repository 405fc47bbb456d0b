"""The channel layer's settings, in one place for the settings module and the tests that stand one up."""
from __future__ import annotations

# channels_redis waits for a socket's next message with BZPOPMIN for up to 5 s (RedisChannelLayer.brpop_timeout).
# redis-py 8 made 5 s every connection's default read timeout, so an idle socket's wait timed out in the client
# (redis.exceptions.TimeoutError) just before Redis answered, which dropped every live tree socket of an idle run
# every few seconds. A read now waits longer than the blocking pop: a dead connection is still noticed, in 30 s.
SOCKET_TIMEOUT_S = 30.0


def redis_channel_layer(url: str) -> dict:
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": url, "socket_timeout": SOCKET_TIMEOUT_S}], "capacity": 5000, "expiry": 30},
    }
