"""The trimming coprocessor as table attributes and as JMX counts, without a
cluster: attaching it keeps what else a table carries, the drift names it,
and the counts reader refuses a server that is not HBase's in one line."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.hbase import HBaseError
from tasks.hbase.jmx import TRIM_BEAN, TrimCounts, trim_counts
from tasks.hbase.settings import Address, Addresses, HBaseSettings
from tasks.hbase.tables import (
    FEED_TRIM_OBSERVER,
    TRIM_CAP_ATTRIBUTE,
    Drift,
    _attributes,
    coprocessors,
)


def test_attaching_keeps_other_coprocessors_and_attributes_and_takes_the_next_slot() -> None:
    found = {b"IS_META": b"false", b"coprocessor$1": b"hdfs:///x.jar|org.other.Observer|100|a=b",
             b"coprocessor$3": b"|org.another.Endpoint|200|"}
    attributes = _attributes(feed_table(25), found)
    assert attributes[b"coprocessor$4"] == f"|{FEED_TRIM_OBSERVER}|1073741823|".encode()
    assert attributes[TRIM_CAP_ATTRIBUTE.encode()] == b"25"
    assert {k: v for k, v in attributes.items() if k in found} == found
    assert coprocessors(attributes) == {b"coprocessor$1": "org.other.Observer",
                                        b"coprocessor$3": "org.another.Endpoint",
                                        b"coprocessor$4": FEED_TRIM_OBSERVER}
    # Attached already: the same slot, only the cap changes.
    again = _attributes(feed_table(7), attributes)
    assert coprocessors(again) == coprocessors(attributes) and again[TRIM_CAP_ATTRIBUTE.encode()] == b"7"


def test_the_feed_table_is_defined_with_the_coprocessor_and_a_checked_cap() -> None:
    assert FOLLOWING_FEED.coprocessor == FEED_TRIM_OBSERVER
    assert dict(FOLLOWING_FEED.values) == {TRIM_CAP_ATTRIBUTE: "1000"}
    assert dict(feed_table(5).values) == {TRIM_CAP_ATTRIBUTE: "5"}
    for bad in (0, -1, 2.5, "10", True):
        with pytest.raises(ValueError, match="feed cap must be an int >= 1"):
            feed_table(bad)  # type: ignore[arg-type]


def test_table_level_drift_reads_in_one_line_and_does_not_stop_workers() -> None:
    drift = Drift("standby", "following_feed", None, "coprocessor", "none", FEED_TRIM_OBSERVER)
    assert str(drift) == f"standby following_feed: coprocessor is none, defined {FEED_TRIM_OBSERVER}"
    assert drift.tuning
    assert not Drift("standby", "following_feed", None, None, "missing", "defined").tuning


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(body: bytes) -> Iterator[Address]:
    handler = type("Handler", (_Handler,), {"body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Address("127.0.0.1", server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def one(address: Address) -> Addresses:
    return Addresses((address,))


def test_the_counts_come_from_the_coprocessors_bean() -> None:
    bean = {"name": TRIM_BEAN, "CellsDropped": 500, "RowsTrimmed": 2, "CompactionsTrimmed": 3, "CompactionsPassed": 1}
    with serving(json.dumps({"beans": [bean]}).encode()) as address:
        assert trim_counts("primary", one(address)) == TrimCounts(500, 2, 3, 1)
    with serving(b'{"beans": []}') as address:  # no region of an attached table has opened there
        assert trim_counts("primary", one(address)) is None


def test_the_counts_of_every_region_server_are_summed() -> None:
    bean = {"name": TRIM_BEAN, "CellsDropped": 500, "RowsTrimmed": 2, "CompactionsTrimmed": 3, "CompactionsPassed": 1}
    other = {"name": TRIM_BEAN, "CellsDropped": 7, "RowsTrimmed": 1, "CompactionsTrimmed": 1, "CompactionsPassed": 0}
    with serving(json.dumps({"beans": [bean]}).encode()) as a, serving(json.dumps({"beans": [other]}).encode()) as b, \
            serving(b'{"beans": []}') as idle:
        servers = Addresses.parse(f"{a},{b} , {idle}")
        assert str(servers) == f"{a},{b},{idle}"
        assert trim_counts("primary", servers) == TrimCounts(507, 3, 4, 1)
        assert trim_counts("primary", Addresses((idle, idle))) is None


@pytest.mark.parametrize("body", [b"<html>not JMX</html>", b'{"beans": [{"CellsDropped": "many"}]}', b"[]",
                                  b"x" * (2 << 20)])
def test_a_server_that_is_not_hbases_jmx_is_one_clear_line(body: bytes) -> None:
    with serving(body) as address, pytest.raises(HBaseError) as caught:
        trim_counts("standby", one(address))
    message = str(caught.value)
    assert message.startswith(f"hbase standby ({address}): read the trimming counts (JMX): ")
    assert "\n" not in message


def test_nothing_listening_is_one_clear_line() -> None:
    with serving(b"") as address:
        pass  # closed: the port refuses
    with pytest.raises(HBaseError, match="read the trimming counts"):
        trim_counts("primary", one(address), timeout_s=1)


def test_the_info_addresses_are_settings_that_default_to_the_local_clusters() -> None:
    defaults = HBaseSettings.from_env({})
    # The master's web server hosts the region server's JMX, unless every
    # region server is a process of its own (scripts/hbase's layouts).
    primary = ("127.0.0.1:16131,127.0.0.1:16132,127.0.0.1:16133"
               if os.environ.get("PINLATER_HBASE_LAYOUT") == "distributed" else "127.0.0.1:16110")
    assert (str(defaults.primary_info), str(defaults.standby_info)) == (primary, "127.0.0.1:16210")
    moved = HBaseSettings.from_env({"PINLATER_HBASE_STANDBY_INFO": "10.0.0.5:16030"})
    assert str(moved.standby_info) == "10.0.0.5:16030"
    with pytest.raises(ValueError, match="PINLATER_HBASE_PRIMARY_INFO: must look like HOST:PORT"):
        HBaseSettings.from_env({"PINLATER_HBASE_PRIMARY_INFO": "nonsense"})
