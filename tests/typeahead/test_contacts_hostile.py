"""The Contacts Service against hostile clients, as ``tests/thrift/
test_hostile.py`` tries the job server: it runs on the same kit, and these
check that its limits reach this service too. Slow clients that never
finish a frame are closed within the frame timeout, one address cannot
hold more than its share of connections, and a well-behaved client's
lookups (on one connection, and on fresh ones) keep being answered
meanwhile. Over the fake index of ``tests.typeahead.support``."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest

from pinlater.settings import Settings
from tasks.typeahead.service import ContactsServer, idl
from tasks.typeahead.wire import connect
from tests.support.call_loop import CallLoop
from tests.thrift.rawwire import length_prefix
from tests.thrift.test_hostile import close_all, open_from, server_closed
from tests.typeahead.support import OWNER, FakeIndex

FRAME_TIMEOUT_S = 2.0
PER_CLIENT = 16
NORMAL_BOUND_S = 2.0


@contextlib.contextmanager
def serving(**limits: str) -> Iterator[ContactsServer]:
    server = ContactsServer(FakeIndex().lookup, "127.0.0.1", 0, settings=Settings.from_env(limits)).start()
    try:
        yield server
    finally:
        server.stop(grace_s=2)


class Looker(CallLoop):
    """Lookups in a loop from 127.0.0.1, in a thread, alternately on one
    kept connection and on a fresh one."""

    def __init__(self, port: int) -> None:
        super().__init__(self._one, NORMAL_BOUND_S)
        self.port = port
        self.kept = connect("127.0.0.1", port, timeout_ms=5000)

    def close(self) -> None:
        self.kept.close()

    def _one(self, i: int) -> str:
        if i % 2:
            _matched(self.kept)
            return "kept connection"
        fresh = connect("127.0.0.1", self.port, timeout_ms=5000)
        try:
            _matched(fresh)
        finally:
            fresh.close()
        return "new connection"


def _matched(client: object) -> None:
    answer = client.lookup(idl.LookupRequest(owner=OWNER, query="john sm"))  # type: ignore[attr-defined]
    assert answer.matches, "a lookup answered with no match"


def test_slow_clients_are_closed_within_the_frame_timeout() -> None:
    with serving(PINLATER_SERVER_FRAME_TIMEOUT_S=str(FRAME_TIMEOUT_S)) as server, Looker(server.port) as looker:
        slow: list[socket.socket] = []
        for i in range(30):  # a frame begun, then a byte a second: never whole
            [s] = open_from(f"127.0.0.{3 + i % 2}", server.port, 1, time.monotonic() + 5)
            s.sendall(length_prefix(1000) + b"\x80")
            slow.append(s)
        started = time.monotonic()
        closed_at: dict[int, float] = {}
        while len(closed_at) < len(slow) and time.monotonic() - started < 8:  # bounded
            time.sleep(0.5)
            for i, s in enumerate(slow):
                if i in closed_at:
                    continue
                if server_closed(s):
                    closed_at[i] = time.monotonic() - started
                    continue
                with contextlib.suppress(OSError):
                    s.send(b"\x01")
        worst = looker.check(min_calls=10)
        close_all(slow)
        timeouts = server.stats.frame_timeouts
    assert len(closed_at) == len(slow), f"{len(slow) - len(closed_at)} slow clients still connected after 8 s"
    assert max(closed_at.values()) < 2 * FRAME_TIMEOUT_S
    assert timeouts >= len(slow)
    print(f"30 slow clients closed after {max(closed_at.values()):.1f} s at most; "
          f"lookups at most {worst * 1000:.0f} ms")


def test_one_address_holds_at_most_its_share_of_connections() -> None:
    with serving(PINLATER_SERVER_MAX_CONNECTIONS="128",
                 PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT=str(PER_CLIENT)) as server, Looker(server.port) as looker:
        time.sleep(0.3)
        hostile = open_from("127.0.0.2", server.port, 300, time.monotonic() + 20)
        time.sleep(1.5)  # the well-behaved client keeps looking up while they are held
        worst = looker.check(min_calls=10)
        stats = server.stats
        # Past its share, each new one takes the slot of its own oldest idle one.
        over = stats.connections_over_client_limit + stats.connections_shed
        open_now = stats.connections_open
        close_all(hostile)
    assert len(hostile) == 300
    assert over >= 300 - PER_CLIENT
    assert open_now <= PER_CLIENT + 2, open_now  # the hostile address's share, and the looker's
    print(f"300 connections from one address: {over} closed; lookups at most {worst * 1000:.0f} ms")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "many"])
def test_a_bad_limit_is_refused_before_the_service_starts(value: str) -> None:
    with pytest.raises(Exception, match="PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT") as caught:
        Settings.from_env({"PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT": value})
    assert "\n" not in str(caught.value)
