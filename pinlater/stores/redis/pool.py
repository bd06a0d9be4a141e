"""The one way this project opens a Redis connection pool."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError  # type: ignore[attr-defined]  # public; types-redis predates it
from redis.retry import Retry

from pinlater.kit.redisconn import tls_options
from pinlater.kit.urls import USERINFO_PROBLEM, unencoded_userinfo

# Enough for a Thrift server's threads plus background work; beyond it a
# caller waits (BlockingConnectionPool) instead of failing, since a full
# pool is load, not an outage.
MAX_CONNECTIONS = 256
POOL_EXHAUSTED = "No connection available"
# Error codes of a server that answers but will not write: out of memory
# under noeviction, a replica, a failed RDB save (a full disk), too few
# replicas. redis-py keeps the code in the text of those it has no class for.
WRITE_REFUSED_CODES = ("MISCONF", "NOREPLICAS")


HEALTH_CHECK_S = 30
# redis-py's message for a PING not answered PONG (guarded by
# tests/unit/test_third_party_guards.py).
BAD_PING = "Bad response from PING health check"


def open_redis(url: str, socket_timeout_s: float) -> redis.Redis[bytes]:
    """A client of ``url``: ``redis://`` or ``rediss://`` (TLS), with
    ``USER:PASSWORD@`` for an ACL user and, for TLS, redis-py's own query
    names ``ssl_ca_certs`` (the CA that signed the server's certificate;
    without it the system's CAs) and ``ssl_certfile``/``ssl_keyfile`` (a
    client certificate). A bad URL or unreadable TLS file is a ValueError
    here, not a failure at the first command."""
    if unencoded_userinfo(url):  # redis-py would name a piece of the password as the port
        raise ValueError(f"Redis URL: {USERINFO_PROBLEM}")
    pool = redis.BlockingConnectionPool.from_url(
        url,
        **tls_options(url),
        max_connections=MAX_CONNECTIONS,
        timeout=socket_timeout_s,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        # No silent retries: a retried script could enqueue twice or make an
        # ACK that was applied look stale.
        retry=Retry(NoBackoff(), 0),
        # A PING before a connection's first command (and after it idled
        # this long): a server of another kind that answers in RESP (an
        # echo) is found there, not by a command reading a wrong answer.
        health_check_interval=HEALTH_CHECK_S,
    )
    return redis.Redis(connection_pool=pool, decode_responses=False)


def is_pool_exhausted(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.ConnectionError) and POOL_EXHAUSTED in str(exc)


def is_unusable(exc: redis.exceptions.RedisError) -> bool:
    """The server cannot be used at all: down, not a Redis server, wrong
    credentials or a db number it does not have. Anything else is one
    command failing on a server that works."""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return True  # includes AuthenticationError
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return True
    text = str(exc)
    return any(marker in text for marker in ("DB index is out of range", "NOAUTH", "WRONGPASS", "NOPERM"))


# redis-py's messages for a failure once a command was written: reading its
# answer timed out or the connection dropped (redis/connection.py,
# redis/_parsers/socket.py; tests/unit/test_third_party_guards.py holds them).
AFTER_SEND_MARKERS = ("Timeout reading from", "Error while reading from", "Connection closed by server")


def is_after_send(exc: redis.exceptions.RedisError) -> bool:
    """The command was sent before it failed, so it may have run."""
    return isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError) and any(
        marker in str(exc) for marker in AFTER_SEND_MARKERS)


# redis-py's prefix to the server's error for a command of a MULTI pipeline
# (redis/client.py, annotate_exception): it quotes the command's arguments.
PIPELINE_ERROR = " of pipeline caused error: "


def _server_text(exc: redis.exceptions.RedisError) -> str:
    """The server's own error text, without redis-py's pipeline prefix,
    which names the failed command and quotes its arguments (job bodies,
    configs): those stay out of messages and logs."""
    text = str(exc)
    if text.startswith("Command # ") and PIPELINE_ERROR in text:
        return text.partition(PIPELINE_ERROR)[2]
    return text


def is_write_refused(exc: redis.exceptions.RedisError) -> bool:
    """The server answers but refuses to write (OOM, READONLY, MISCONF,
    NOREPLICAS), also when a script's write, or one of a MULTI pipeline's
    commands, is the command refused."""
    if isinstance(exc, OutOfMemoryError | redis.exceptions.ReadOnlyError):
        return True
    return isinstance(exc, redis.exceptions.ResponseError) and _server_text(exc).startswith(WRITE_REFUSED_CODES)


def describe(exc: redis.exceptions.RedisError) -> str:
    """One line for an error of redis-py's."""
    text = " ".join(_server_text(exc).split()) or type(exc).__name__
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return f"not a Redis server? ({text})"
    if BAD_PING in text:
        return "not a Redis server? (it did not answer PING with PONG)"
    return text
