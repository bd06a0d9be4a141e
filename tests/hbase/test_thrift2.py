"""The Thrift2 client: our IDL against HBase's, and its errors (a Thrift1
port, a silent port, a full pool, server-side failures; a closed port is in
test_outages)."""

from __future__ import annotations

import contextlib
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
    put_versions,
)
from tasks.hbase.idl import THRIFT2
from tasks.hbase.settings import Address
from tasks.hbase.thrift2 import within
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
        "hbase primary (127.0.0.1:19090): put 1 cells into following_feed: "
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
