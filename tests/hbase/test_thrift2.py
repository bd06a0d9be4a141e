"""The Thrift2 client: our IDL against HBase's, and its errors (a Thrift1
port, a silent port, a full pool, server-side failures; a closed port is in
test_outages)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import thriftpy2

from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import (
    ClusterPair,
    ClusterPool,
    HBaseRequestFailed,
    HBaseSettings,
    HBaseUnavailable,
    delete_versions,
    get_versions,
    put_tables,
    put_versions,
)
from tasks.hbase import thrift2 as thrift2_module
from tasks.hbase.idl import THRIFT2
from tasks.hbase.reads import get_rows, scan_range
from tasks.hbase.settings import Address
from tasks.hbase.thrift2 import within, write_width
from tests.servers import REPO, ensure_services
from tests.support.hbase import PREFIX, test_settings

FEED = FOLLOWING_FEED.name
CELL = [(b"r", b"feed:q", b"", 1)]
JAR = "/hbase-thrift-2.6.1.jar"


def spec(value: Any) -> Any:
    """A thrift_spec with the struct classes it names replaced by their names."""
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, tuple | list):
        return tuple(spec(v) for v in value)
    if isinstance(value, dict):
        return {k: spec(v) for k, v in value.items()}
    return value


def test_our_idl_has_hbase_2_6_1_field_ids_and_types(tmp_path: Path) -> None:
    ensure_services()  # resolves the jars
    classpath = Path(os.environ.get("PINLATER_CACHE", REPO / ".cache")) / "hbase" / "classpath.txt"
    jar = next(Path(p) for p in classpath.read_text().strip().split(":") if p.endswith(JAR))
    with zipfile.ZipFile(jar) as archive:
        (tmp_path / "hbase.thrift").write_bytes(archive.read("org/apache/hadoop/hbase/thrift2/hbase.thrift"))
    real = thriftpy2.load(str(tmp_path / "hbase.thrift"), module_name="apache_hbase_thrift2_thrift")
    for name, ours in vars(THRIFT2).items():
        if hasattr(ours, "thrift_spec"):  # structs and exceptions: each field as HBase's, some left out
            theirs = spec(getattr(real, name).thrift_spec)
            assert {k: theirs.get(k) for k in ours.thrift_spec} == spec(ours.thrift_spec), name
        elif hasattr(ours, "_NAMES_TO_VALUES"):  # enums: whole
            assert ours._NAMES_TO_VALUES == getattr(real, name)._NAMES_TO_VALUES, name
    for method in THRIFT2.THBaseService.thrift_services:
        for part in ("_args", "_result"):
            ours, theirs = (getattr(m.THBaseService, method + part).thrift_spec for m in (THRIFT2, real))
            assert spec(ours) == spec(theirs), method + part


def lone_pool(thrift2: Address, **options: Any) -> ClusterPool:
    settings = test_settings(**options)
    return ClusterPool.for_cluster("primary", settings.primary, settings, thrift2)


def test_a_thrift1_port_is_a_clear_error() -> None:
    ensure_services()
    settings = HBaseSettings.from_env({"PINLATER_HBASE_PRIMARY_THRIFT2": "127.0.0.1:19090",
                                       "PINLATER_HBASE_TABLE_PREFIX": PREFIX, "PINLATER_HBASE_ATTEMPTS": "1"})
    pair = ClusterPair.from_settings(settings)
    started = time.monotonic()
    with pytest.raises(HBaseUnavailable) as caught:
        put_versions(pair.primary, FEED, CELL)
    assert time.monotonic() - started < 2
    assert str(caught.value) == (
        "hbase primary (127.0.0.1:19090): put cells into following_feed: "
        "not a Thrift2 server: getThriftServerType() answers ONE (a Thrift1 port?)"
    )
    pair.close()


@contextlib.contextmanager
def port_that_never_answers() -> Iterator[Address]:
    """Accepts connections (the kernel's backlog does) and never reads them."""
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        yield Address("127.0.0.1", listener.getsockname()[1])
    finally:
        listener.close()


def test_a_silent_port_is_bounded_by_the_call_timeout() -> None:
    with port_that_never_answers() as silent:
        pool = lone_pool(silent, call_timeout_s=1.0, attempts=1)
        started = time.monotonic()
        with pytest.raises(HBaseUnavailable, match=r"^hbase primary \(127\.0\.0\.1:\d+\): get versions .*timed out"):
            get_versions(pool, FEED, [b"r"])
        assert 0.9 <= time.monotonic() - started < 2.0


def test_waiting_for_a_free_connection_is_bounded() -> None:
    with port_that_never_answers() as silent:
        pool = lone_pool(silent, call_timeout_s=2.0, pool_size=1, pool_wait_s=0.2, attempts=1)
        stuck: list[BaseException] = []

        def take_the_one_connection() -> None:
            try:
                put_versions(pool, FEED, CELL)
            except HBaseUnavailable as exc:  # after the call timeout
                stuck.append(exc)

        busy = threading.Thread(target=take_the_one_connection)
        busy.start()
        time.sleep(0.2)
        started = time.monotonic()
        with pytest.raises(HBaseUnavailable, match=r"no free Thrift2 connection within 0.2s \(pool of 1\)"):
            put_versions(pool, FEED, CELL)
        assert time.monotonic() - started < 1.0
        busy.join()
        assert "timed out" in str(stuck[0])


def test_a_deadline_bounds_a_silent_call_and_its_wait_for_a_connection_without_a_retry() -> None:
    with port_that_never_answers() as silent:
        pool = lone_pool(silent, call_timeout_s=10.0, pool_size=1, pool_wait_s=5.0, attempts=2)
        started = time.monotonic()
        with within(0.3), pytest.raises(HBaseUnavailable, match=r"get versions .*timed out"):
            get_versions(pool, FEED, [b"r"])  # the connect's handshake meets the deadline
        assert 0.25 <= time.monotonic() - started < 1.5
        taken = threading.Event()

        def hold_the_one_connection() -> None:
            with within(2.0), contextlib.suppress(HBaseUnavailable):
                taken.set()
                put_versions(pool, FEED, CELL)

        busy = threading.Thread(target=hold_the_one_connection)
        busy.start()
        taken.wait(5)
        time.sleep(0.1)
        started = time.monotonic()
        with within(0.3), pytest.raises(HBaseUnavailable, match=r"no free Thrift2 connection within 0.3s"):
            put_versions(pool, FEED, CELL)
        assert time.monotonic() - started < 1.0
        busy.join()


def test_a_deadline_met_leaves_the_pool_as_it_was(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    put_versions(pool, FEED, [(row, b"feed:q", b"v", 5)])
    with within(0.0), pytest.raises(HBaseUnavailable, match=r"deadline passed before it was sent"):
        get_versions(pool, FEED, [row])
    with within(30.0):
        assert get_versions(pool, FEED, [row])
    assert get_versions(pool, FEED, [row])  # the call timeout again, outside the block


def test_a_thrift1_call_is_refused_under_a_deadline_and_get_rows_keeps_it(pair: ClusterPair, row: bytes) -> None:
    # happybase's calls wait out the pool's timeouts whatever the deadline: a
    # lookup's second-degree read through it once outlived a black-holed
    # primary's fault, where it should have moved to the standby.
    pool = pair.primary
    put_versions(pool, FEED, [(row, b"feed:q", b"old", 5), (row, b"feed:q", b"new", 6), (row, b"feed:r", b"r", 5)])
    with within(30.0):
        with pytest.raises(RuntimeError, match=r"^hbase primary: scan .* goes through Thrift1, which cannot keep"):
            scan_range(pool, FEED, start=row, stop=row + b"\0")
        assert get_rows(pool, FEED, [row, b"no-such-row"], columns=[b"feed:q"]) == {row: {b"feed:q": b"new"}}
    assert get_rows(pool, FEED, [row]) == {row: {b"feed:q": b"new", b"feed:r": b"r"}}
    assert scan_range(pool, FEED, start=row, stop=row + b"\0", columns=[b"feed:r"]) == [(row, {b"feed:r": b"r"})]
    with port_that_never_answers() as silent:
        lone = lone_pool(silent, call_timeout_s=10.0, pool_size=1, pool_wait_s=5.0, attempts=2)
        started = time.monotonic()
        with within(0.3), pytest.raises(HBaseUnavailable, match=r"get versions .*timed out"):
            get_rows(lone, FEED, [row])
        assert time.monotonic() - started < 1.5


def test_missing_table_is_a_one_line_request_error_and_the_pool_goes_on(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    for call in (
        lambda: put_versions(pool, "no_such_table", [(row, b"feed:q", b"", 1)]),
        lambda: delete_versions(pool, "no_such_table", [(row, b"feed:q", 1, "version")]),
        lambda: get_versions(pool, "no_such_table", [row]),
    ):
        with pytest.raises(HBaseRequestFailed) as caught:
            call()
        message = str(caught.value)
        assert message.startswith("hbase primary (127.0.0.1:19092): ") and "no_such_table" in message
        assert "TIOError" in message and "\n" not in message
    # The connection that carried the errors is still good.
    assert put_versions(pool, FEED, [(row, b"feed:q", b"", 1)]) == 1
    assert get_versions(pool, FEED, [row]) == {row: {b"feed:q": [(1, b"")]}}


def test_a_pool_made_without_a_thrift2_address_says_so() -> None:
    pool = ClusterPool("reads-only", Address("127.0.0.1", 19090))
    with pytest.raises(ValueError, match=r"hbase reads-only \(127.0.0.1:19090\): no Thrift2 address"):
        put_versions(pool, FEED, CELL)


def calls_in_flight(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Records each pre-encoded call's connection and how many calls were
    in flight as it started; each call lasts at least 50 ms, so calls sent
    together are seen together."""
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    flying = [0]
    original = thrift2_module._Connection.call_encoded

    def call_encoded(connection: Any, method: str, body: bytes) -> Any:
        with lock:
            flying[0] += 1
            seen.append((id(connection), flying[0]))
        try:
            time.sleep(0.05)
            return original(connection, method, body)
        finally:
            with lock:
                flying[0] -= 1

    monkeypatch.setattr(thrift2_module._Connection, "call_encoded", call_encoded)
    return seen


def test_a_write_of_many_calls_goes_out_on_as_many_connections_as_the_pool_has(
        pair: ClusterPair, row: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = lone_pool(pair.primary.thrift2.address, pool_size=3)
    rows = [row + b"-%02d" % i for i in range(12)]
    seen = calls_in_flight(monkeypatch)
    assert put_versions(pool, FEED, [(r, b"feed:q", b"v", 7) for r in rows], batch_size=2) == 12
    # 6 calls in 3 runs of 2, each run on a connection of its own, all at once.
    assert len(seen) == 6 and len({connection for connection, _ in seen}) == 3
    assert max(flying for _, flying in seen) == 3
    assert get_versions(pool, FEED, rows) == {r: {b"feed:q": [(7, b"v")]} for r in rows}
    seen.clear()
    assert put_versions(pool, FEED, [(rows[0], b"feed:q", b"w", 8)]) == 1
    assert [flying for _, flying in seen] == [1]  # one call: no helper involved
    pool.close()


def test_every_run_ends_before_the_first_error_is_raised(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    rows = [row + b"-%02d" % i for i in range(6)]
    cells = [(r, b"feed:q", b"v", 3) for r in rows]
    with pytest.raises(HBaseRequestFailed) as caught:
        put_tables(pool, {FEED: cells, "no_such_table": [(row, b"feed:q", b"", 1)]}, batch_size=3)
    message = str(caught.value)
    assert "put cells into following_feed, no_such_table" in message and "\n" not in message
    # The missing table's call failed on a helper; the feed's calls all landed.
    assert get_versions(pool, FEED, rows) == {r: {b"feed:q": [(3, b"v")]} for r in rows}


def test_a_deadline_bounds_the_runs_sent_by_helpers_too() -> None:
    with port_that_never_answers() as silent:
        pool = lone_pool(silent, call_timeout_s=10.0, pool_size=3, pool_wait_s=5.0, attempts=2)
        started = time.monotonic()
        cells = [(b"r%d" % i, b"feed:q", b"v", 1) for i in range(3)]
        with within(0.3), pytest.raises(HBaseUnavailable, match=r"timed out"):
            put_versions(pool, FEED, cells, batch_size=1)  # 3 runs, 2 of them on helpers
        assert time.monotonic() - started < 1.5


def _write_in_child(address: Address, rows: list[bytes]) -> None:
    pool = lone_pool(address, pool_size=2)
    put_versions(pool, FEED, [(r, b"feed:q", b"child", 9) for r in rows], batch_size=1)
    pool.close()


def test_a_forked_child_sends_runs_on_helpers_of_its_own(pair: ClusterPair, row: bytes) -> None:
    pool = pair.primary
    rows = [row + b"-%d" % i for i in range(4)]
    put_versions(pool, FEED, [(r, b"feed:q", b"parent", 8) for r in rows], batch_size=1)  # the parent's helpers
    child = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(pool.thrift2.address, rows))
    child.start()
    child.join(30)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode == 0  # the parent's helper threads do not exist in the child: it made its own
    assert get_versions(pool, FEED, rows) == {r: {b"feed:q": [(9, b"child"), (8, b"parent")]} for r in rows}


def test_a_write_width_bounds_the_calls_at_once_within_its_block(
        pair: ClusterPair, row: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = lone_pool(pair.primary.thrift2.address, pool_size=4)
    rows = [row + b"-%02d" % i for i in range(8)]
    seen = calls_in_flight(monkeypatch)
    with write_width(1):
        assert put_versions(pool, FEED, [(r, b"feed:q", b"v", 4) for r in rows], batch_size=2) == 8
        with write_width(2):
            put_versions(pool, FEED, [(r, b"feed:q", b"v", 5) for r in rows], batch_size=2)
        one_at_a_time, two = seen[:4], seen[4:]
        assert len({c for c, _ in one_at_a_time}) == 1 and max(f for _, f in one_at_a_time) == 1
        assert len(two) == 4 and max(f for _, f in two) == 2
        seen.clear()
        put_versions(pool, FEED, [(r, b"feed:q", b"v", 6) for r in rows], batch_size=2)
        assert max(f for _, f in seen) == 1  # the outer block's width again
    seen.clear()
    put_versions(pool, FEED, [(r, b"feed:q", b"v", 7) for r in rows], batch_size=2)
    assert max(f for _, f in seen) == 4  # outside any block: the pool's size
    assert get_versions(pool, FEED, rows[:1]) == {rows[0]: {b"feed:q": [(7, b"v"), (6, b"v"), (5, b"v"), (4, b"v")]}}
    for bad in (0, -1):
        with pytest.raises(ValueError, match=r"^write width must be >= 1 or None, got -?\d+$"), write_width(bad):
            pass
    pool.close()
