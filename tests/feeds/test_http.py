"""The feed endpoint and ``pinlater-feeds`` on the real servers: pages
through HTTP match the feed newest first, every refusal is a one-line JSON
error with its status, a black-holed primary is served by the standby
within the cut-off, and the CLI's errors are one line and exit 2."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinlater.kit.devcerts import DevCA
from pinlater.kit.httplimits import SLOW_S
from tasks.appdata import graph
from tasks.appdata.ids import ID_LIMIT, ObjectType, make_id
from tasks.appdata.store import AppData
from tasks.feeds.http import FeedServer
from tasks.feeds.read import FeedReader
from tasks.hbase import ClusterPair, ClusterPool
from tasks.hbase.settings import Address
from tests.feeds.helpers import feed_of, silent_port, user
from tests.http_client import (
    BAD_HTTP,
    MALFORMED,
    SERVE_ADDRESSES,
    ServeCase,
    assert_error,
    assert_malformed_answered,
    listening_line,
    request,
    serving,
)
from tests.servers import REPO
from tests.support.appdata import ENV as APPDATA_ENV
from tests.support.gc_probe import probed, reports
from tests.support.hbase import PREFIX as HBASE_PREFIX

MARGIN_S = 1.5
CUTOFF_S = 0.3


def serve(reader: FeedReader) -> FeedServer:
    return FeedServer(reader, "127.0.0.1", 0, request_timeout_s=5.0).start()


@pytest.fixture(scope="module")
def server(appdata: AppData, pair: ClusterPair) -> Iterator[FeedServer]:
    server = serve(FeedReader(pair, appdata, cutoff_s=2.0, shadow_share=0.5))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def feed(appdata: AppData, pair: ClusterPair) -> tuple[int, list[int]]:
    return feed_of(appdata, pair, 5)


def test_pages_newest_first_through_the_cursor(server: FeedServer, feed: tuple[int, list[int]]) -> None:
    follower, newest_first = feed
    seen: list[int] = []
    cursor: str | None = None
    for _ in range(3):
        status, page, _ = request(server, f"/v1/feeds/{follower}?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200 and page["served_by"] == "primary"
        assert page["user_id"] == follower and page["user_id_str"] == str(follower)
        for pin in page["pins"]:
            assert pin["id_str"] == str(pin["id"])
            assert pin["data"]["title"] == f"pin at {pin['created_at_ms']}"
        seen.extend(pin["id"] for pin in page["pins"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == newest_first and cursor is None
    status, whole, _ = request(server, f"/v1/feeds/{follower}")  # the default limit takes it all
    assert status == 200 and [p["id"] for p in whole["pins"]] == newest_first and whole["next_cursor"] is None


def test_healthz_and_an_empty_feed(server: FeedServer, appdata: AppData) -> None:
    assert request(server, "/healthz")[:2] == (200, {"ok": True})
    nobody = user(appdata, "follows nobody")
    status, page, _ = request(server, f"/v1/feeds/{nobody}")
    assert status == 200 and page["pins"] == [] and page["next_cursor"] is None


USER_1 = make_id(0, ObjectType.USER, 1)
BAD_REQUESTS = [
    "/v1/feeds/abc",
    "/v1/feeds/-1",
    "/v1/feeds/%2B1",  # "+1"
    "/v1/feeds/1.0",
    f"/v1/feeds/{2**64}",
    f"/v1/feeds/{ID_LIMIT + USER_1}",  # reserved bits set
    f"/v1/feeds/{make_id(0, ObjectType.PIN, 1)}",
    "/v1/feeds/%FF",  # not UTF-8
    f"/v1/feeds/{USER_1}?limit=0",
    f"/v1/feeds/{USER_1}?limit=501",
    f"/v1/feeds/{USER_1}?limit=ten",
    f"/v1/feeds/{USER_1}?limit=2.5",
    f"/v1/feeds/{USER_1}?limit=",
    f"/v1/feeds/{USER_1}?limit=1&limit=2",
    f"/v1/feeds/{USER_1}?cursor=nope",
    f"/v1/feeds/{USER_1}?cursor=" + "9" * 31,
    f"/v1/feeds/{USER_1}?cursor=%C3%A9" + "9" * 31,
    f"/v1/feeds/{USER_1}?cursor=" + "x" * 5000,
    f"/v1/feeds/{USER_1}?page=2",
]


@pytest.mark.parametrize("path", BAD_REQUESTS)
def test_bad_requests_are_400(server: FeedServer, path: str) -> None:
    status, answer, raw = request(server, path)
    assert status == 400, answer
    assert_error(raw, answer)
    assert len(answer["error"]) < 600


def test_a_board_id_is_not_a_user_id(server: FeedServer, appdata: AppData) -> None:
    board = graph.create_board(appdata, user(appdata, "owner"), {"name": "b"}).id
    status, answer, raw = request(server, f"/v1/feeds/{board}")
    assert status == 400 and "not a user" in answer["error"]
    assert_error(raw, answer)


@pytest.mark.parametrize("path", ["/", "/v1/feeds", "/v1/feeds/", f"/v1/feeds/{USER_1}/x", f"/v2/feeds/{USER_1}"])
def test_unknown_paths_are_404(server: FeedServer, path: str) -> None:
    status, answer, raw = request(server, path)
    assert status == 404
    assert_error(raw, answer)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW", "HEAD"])
def test_other_methods_are_405(server: FeedServer, method: str) -> None:
    status, answer, raw = request(server, f"/v1/feeds/{USER_1}", method)
    assert status == 405
    if method == "HEAD":
        assert answer is None  # no body after a HEAD
    else:
        assert_error(raw, answer)


@pytest.mark.parametrize(("data", "status"), MALFORMED)
def test_malformed_http_is_a_json_error_and_closes(server: FeedServer, data: bytes, status: bytes) -> None:
    assert_malformed_answered(server, data, status)


def test_both_clusters_down_is_503_with_the_cause(appdata: AppData) -> None:
    nowhere = Address("127.0.0.1", 19099)  # nothing listens there
    dead = ClusterPair(ClusterPool("primary", nowhere, attempts=1, thrift2_address=nowhere),
                       ClusterPool("standby", nowhere, attempts=1, thrift2_address=nowhere))
    server = serve(FeedReader(dead, appdata, cutoff_s=0.2))
    try:
        status, answer, raw = request(server, f"/v1/feeds/{USER_1}")
        assert status == 503
        assert_error(raw, answer)
        assert answer["error"].startswith("feed unavailable: ")
        assert "hbase primary" in answer["error"] and "hbase standby" in answer["error"]
    finally:
        server.stop()
        dead.close()


def test_a_black_holed_primary_is_served_by_the_standby(
    appdata: AppData, pair: ClusterPair, feed: tuple[int, list[int]]
) -> None:
    follower, newest_first = feed
    with silent_port() as hole:
        slow = ClusterPool("primary", hole, call_timeout_s=3.0, attempts=1, table_prefix=pair.primary.table_prefix,
                           thrift2_address=hole)
        server = serve(FeedReader(ClusterPair(slow, pair.standby), appdata, cutoff_s=CUTOFF_S))
        try:
            started = time.monotonic()
            status, page, _ = request(server, f"/v1/feeds/{follower}")
            elapsed = time.monotonic() - started
            assert status == 200 and page["served_by"] == "standby"
            assert [p["id"] for p in page["pins"]] == newest_first
            assert CUTOFF_S <= elapsed < CUTOFF_S + MARGIN_S
        finally:
            server.stop()
            slow.close()


def test_a_connection_over_the_cap_takes_a_silent_ones_slot_and_stop_closes_the_reader(
    appdata: AppData, pair: ClusterPair
) -> None:
    reader = FeedReader(pair, appdata, cutoff_s=2.0)
    server = FeedServer(reader, "127.0.0.1", 0, request_timeout_s=5.0, max_connections=2).start()
    try:
        silent = [socket.create_connection(server.address, timeout=5) for _ in range(2)]
        time.sleep(SLOW_S + 0.2)  # their first requests are slow now
        started = time.monotonic()
        assert request(server, "/healthz")[0] == 200
        assert time.monotonic() - started < MARGIN_S
        assert server.counters["connections_shed"] == 1
        for sock in silent:
            sock.close()
    finally:
        server.stop()
    with pytest.raises(RuntimeError):  # its executor is shut down
        reader.read(USER_1)


# -- the CLI ------------------------------------------------------------------------
# A fresh process's first read opens its connections; on a loaded machine that
# can pass the default cut-off, and these tests mean the primary's answer.
CLI_ENV = {**os.environ, **APPDATA_ENV, "PINLATER_HBASE_TABLE_PREFIX": HBASE_PREFIX,
           "PINLATER_FEED_READ_CUTOFF_MS": "30000"}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.feeds.cli", *args],
        capture_output=True, text=True, timeout=60, cwd=REPO, env={**CLI_ENV, **(env or {})},
    )


def test_cli_read_prints_a_page(feed: tuple[int, list[int]]) -> None:
    follower, newest_first = feed
    done = cli("read", str(follower), "--limit", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines[:2]] == newest_first[:2]
    _id, created, title = lines[0].split("  ", 2)
    assert created.endswith("Z") and title.startswith("pin at ")
    assert lines[2].startswith("next cursor: ") and lines[3] == "served by: primary"
    cursor = lines[2].removeprefix("next cursor: ")
    done = cli("read", str(follower), "--cursor", cursor, "--limit", "500", "--json")
    assert done.returncode == 0, done.stderr
    page = json.loads(done.stdout)
    assert [p["id"] for p in page["pins"]] == newest_first[2:] and page["next_cursor"] is None


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("read", "abc"), None, "user id must be a decimal number"),
        (("read", str(make_id(0, ObjectType.BOARD, 1))), None, "not a user id"),
        (("read", str(USER_1), "--limit", "0"), None, "limit"),
        (("read", str(USER_1), "--cursor", "bad"), None, "cursor"),
        (("read", str(USER_1), "--limit", "x"), None, "--limit"),
        (("read", str(USER_1)), {"PINLATER_FEED_READ_CUTOFF_MS": "soon"}, "PINLATER_FEED_READ_CUTOFF_MS"),
        (("read", str(USER_1)), {"PINLATER_HBASE_PRIMARY_THRIFT2": "127.0.0.1:19099",
                                 "PINLATER_HBASE_STANDBY_THRIFT2": "127.0.0.1:19099"},
         "feed unavailable: hbase primary"),
        (("sweep",), {"PINLATER_SHARDS": "r1=redis://127.0.0.1:1/0"}, "unavailable"),
        (("serve", "--port", "{taken}"), None, "cannot listen on 127.0.0.1:{taken}"),
        *((("serve",), {"PINLATER_FEED_HTTP": bad}, "PINLATER_FEED_HTTP: must look like HOST:PORT")
          for bad in BAD_HTTP),
        (("serve", "--port", "70000"), None, "--port: must be between 0 and 65535"),
        (("bogus",), None, "invalid choice"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(args: tuple[str, ...], env: dict[str, str] | None, says: str) -> None:
    with silent_port() as taken:
        done = cli(*(a.format(taken=taken.port) for a in args), env=env)
        says = says.format(taken=taken.port)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error") and says in done.stderr, done.stderr
    assert done.stdout == ""


def test_cli_sweep_enqueues_a_sweep() -> None:
    # An in-memory job service: the sweep job goes nowhere shared.
    done = cli("sweep", env={"PINLATER_SHARDS": "m1=memory://", "PINLATER_CONTROL_URL": "memory://feeds-cli"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("trim sweep enqueued: feed_trim_sweep:")


def test_cli_serve_announces_its_port_and_stops_on_sigterm(feed: tuple[int, list[int]]) -> None:
    follower, newest_first = feed
    with serving("tasks.feeds.cli", "--port", "0", env=CLI_ENV) as line:
        assert line.startswith("pinlater-feeds listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", f"/v1/feeds/{follower}")
        page = json.loads(connection.getresponse().read())
        connection.close()
        assert [p["id"] for p in page["pins"]] == newest_first


def test_cli_serve_speaks_https_with_a_certificate(feed: tuple[int, list[int]], tmp_path: Path) -> None:
    follower, newest_first = feed
    ca = DevCA()
    ca.issue("feeds", server_names=("127.0.0.1",)).write(tmp_path / "cert.pem", tmp_path / "key.pem")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    env = {**CLI_ENV, "PINLATER_HTTP_TLS_CERT": str(tmp_path / "cert.pem"),
           "PINLATER_HTTP_TLS_KEY": str(tmp_path / "key.pem")}
    with serving("tasks.feeds.cli", "--port", "0", env=env) as line:
        port = int(line.rsplit(":", 1)[1])
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=trusted)
        connection.request("GET", f"/v1/feeds/{follower}")
        page = json.loads(connection.getresponse().read())
        connection.close()
        assert [p["id"] for p in page["pins"]] == newest_first


def test_cli_serve_collects_as_a_worker_does(tmp_path: Path) -> None:
    """A full collection stops every request thread, so the endpoint
    collects as the workers do (workers.gc_policy)."""
    probe = tmp_path / "probe"
    with serving("tasks.feeds.cli", "--port", "0", env=probed(probe, CLI_ENV)) as line:
        assert line.startswith("pinlater-feeds listening on 127.0.0.1:"), line
    seen = [r for r in reports(probe) if "serve" in r["argv"]]
    assert len(seen) == 1, reports(probe)
    assert tuple(seen[0]["threshold"]) == (700, 10, 100), seen
    assert seen[0]["frozen"] > 10_000, seen  # what it started with, out of every collection


@pytest.mark.parametrize("case", SERVE_ADDRESSES)
def test_cli_serve_listens_on_pinlater_feed_http_unless_flags_say_otherwise(case: ServeCase) -> None:
    line, address = listening_line("tasks.feeds.cli", "PINLATER_FEED_HTTP", case, CLI_ENV)
    assert line == f"pinlater-feeds listening on {address}"
