"""``pinlater.stores.redis.loader.call``, the direct EVALSHA every Redis job
transition goes through, against real Redis servers: replies decoded as
redis-py's ``Script`` decodes them, a lost script cache, error replies, and
connections that fail mid-call (on a redis-server of the test's own, so it
can be killed without touching the shared ones).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pinlater.stores.base import ShardUnavailable
from pinlater.stores.redis import loader
from pinlater.stores.redis.errors import redis_guard
from pinlater.stores.redis.pool import MAX_CONNECTIONS, is_pool_exhausted, is_unusable, open_redis
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.redis_support import URL, wait_for_ping

# Busy for ARGV[1] ms of the server's clock (TIME is not frozen inside a
# script on the Redis these tests run on).
SLOW = """
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + ARGV[1] * 1000
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return 'slept'
"""
ECHO = "return {KEYS[1], ARGV[1]}"


def available(client: redis.Redis[bytes]) -> int:
    """Free slots of the client's BlockingConnectionPool (a free slot holds
    an idle connection or a placeholder for a new one)."""
    pool = client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    return pool.pool.qsize()


def only_connection(client: redis.Redis[bytes]) -> redis.Connection:
    [conn] = client.connection_pool._connections
    assert isinstance(conn, redis.Connection)
    return conn


def is_open(conn: redis.Connection) -> bool:
    """Whether the connection still holds its socket (a dropped one opens a
    new socket before its next command)."""
    return getattr(conn, "_sock", None) is not None


@pytest.fixture
def client(raw: redis.Redis[bytes]) -> Iterator[redis.Redis[bytes]]:
    c = open_redis(URL, 5.0)
    yield c
    c.connection_pool.disconnect()


class OwnRedis:
    """A redis-server of the test's own on a free port (no persistence)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (scripts/services up installs it)"
        self.binary = binary
        self.workdir = workdir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [self.binary, *args, "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        proc = self.proc
        probe: redis.Redis[bytes] = redis.Redis(port=self.port, socket_timeout=1)
        wait_for_ping(probe, 10, alive=lambda: proc.poll() is None)
        probe.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def own(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def wait_until_idle(url: str) -> None:
    """Returns once the server has finished its running script."""
    probe = redis.Redis.from_url(url, socket_timeout=5)
    probe.ping()
    probe.close()


# -- replies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "return {KEYS[1], ARGV[1], 42, {ARGV[2], false}, 3.7}",
        "return redis.status_reply('FINE')",
        "return nil",
        "return true",
        "return tonumber(ARGV[3])",
    ],
)
def test_reply_is_what_redis_py_returns(client: redis.Redis[bytes], text: str) -> None:
    script = client.register_script(text)
    keys, args = ["k\u00e9"], [b"\x00\xffbin", "two", 7]
    before = available(client)
    assert loader.call(client, script, keys, args) == script(keys=keys, args=args, client=client)
    assert available(client) == before


def test_lost_script_cache_loads_the_script_and_runs_it_once(client: redis.Redis[bytes]) -> None:
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    assert loader.call(client, script, ["n"], []) == 1
    client.script_flush()
    assert loader.call(client, script, ["n"], []) == 2  # ran once, after the load
    assert loader.call(client, script, ["n"], []) == 3
    assert available(client) == MAX_CONNECTIONS


def test_error_reply_raises_and_keeps_the_connection(client: redis.Redis[bytes]) -> None:
    be = RedisBackend("r9", client)
    conn_id = client.client_id()
    with pytest.raises(redis.ResponseError, match="bad group"):
        loader.call(client, be._scripts["ack_succeeded"], ["a", "b", "c"], [10, '[[2, 1, "w", ""]]'])
    with pytest.raises(redis.ResponseError, match="boom"):
        loader.call(client, client.register_script("error('boom')"), [], [])
    client.set("s", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        loader.call(client, client.register_script("return redis.call('LPUSH', KEYS[1], 1)"), ["s"], [])
    assert available(client) == MAX_CONNECTIONS
    assert client.client_id() == conn_id  # the same connection, still in use
    assert loader.call(client, client.register_script(ECHO), ["k"], ["v"]) == [b"k", b"v"]


def test_full_pool_raises_what_redis_py_raises(raw: redis.Redis[bytes]) -> None:
    pool = redis.BlockingConnectionPool.from_url(URL, max_connections=1, timeout=0.05)
    client: redis.Redis[bytes] = redis.Redis(connection_pool=pool)
    script = client.register_script(ECHO)
    held = client.connection_pool.get_connection()
    try:
        with pytest.raises(redis.ConnectionError) as direct:
            loader.call(client, script, ["k"], ["v"])
        with pytest.raises(redis.ConnectionError) as via_redis_py:
            script(keys=["k"], args=["v"], client=client)
        assert is_pool_exhausted(direct.value)
        assert str(direct.value) == str(via_redis_py.value)
    finally:
        pool.release(held)
    assert loader.call(client, script, ["k"], ["v"]) == [b"k", b"v"]
    pool.disconnect()


# -- failures mid-call -----------------------------------------------------------


def test_exception_before_the_reply_is_read_drops_the_connection(
    client: redis.Redis[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    echo = client.register_script(ECHO)
    loader.call(client, echo, ["k"], ["first"])
    conn = only_connection(client)

    def interrupted(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt  # e.g. Ctrl-C while waiting for the reply

    monkeypatch.setattr(conn, "read_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        loader.call(client, echo, ["k"], ["lost"])
    monkeypatch.undo()
    assert not is_open(conn)  # its unread reply must not answer the next call
    assert available(client) == MAX_CONNECTIONS
    assert loader.call(client, echo, ["k"], ["next"]) == [b"k", b"next"]


def test_timeout_mid_call_drops_the_connection(own: OwnRedis) -> None:
    client = open_redis(own.url, 0.1)
    slow, echo = client.register_script(SLOW), client.register_script(ECHO)
    loader.call(client, echo, ["k"], ["warm"])
    conn = only_connection(client)
    with pytest.raises(redis.TimeoutError) as err:
        loader.call(client, slow, [], [400])
    assert is_unusable(err.value)
    assert not is_open(conn)  # the late reply cannot reach another call
    assert available(client) == MAX_CONNECTIONS
    wait_until_idle(own.url)
    assert loader.call(client, echo, ["k"], ["next"]) == [b"k", b"next"]
    client.connection_pool.disconnect()


def test_server_lost_mid_call_then_back(own: OwnRedis) -> None:
    client = open_redis(own.url, 5.0)
    slow, echo = client.register_script(SLOW), client.register_script(ECHO)
    loader.call(client, echo, ["k"], ["warm"])
    conn = only_connection(client)
    killer = threading.Timer(0.1, own.kill)
    killer.start()
    try:
        # What a backend reports for it, as before.
        with (
            pytest.raises(ShardUnavailable, match="redis shard own unavailable") as err,
            redis_guard("redis shard own", ShardUnavailable),
        ):
            loader.call(client, slow, [], [2000])
    finally:
        killer.join()
    assert isinstance(err.value.__cause__, redis.ConnectionError)
    assert not is_open(conn)
    assert available(client) == MAX_CONNECTIONS
    with pytest.raises(redis.ConnectionError):  # still down: from the pool's connect
        loader.call(client, echo, ["k"], ["down"])
    assert available(client) == MAX_CONNECTIONS
    own.start()  # a new server on the same port, with an empty script cache
    assert loader.call(client, echo, ["k"], ["back"]) == [b"k", b"back"]
    assert available(client) == MAX_CONNECTIONS
    client.connection_pool.disconnect()
