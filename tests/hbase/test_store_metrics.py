"""The apps' calls to their stores, a real HBase cluster's and the app-data
MariaDB's, are counted on ``/metrics`` of the process that made them, as
the job service's store calls are (``pinlater.observe.seam``)."""

from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families
from pymysql.cursors import Cursor

from pinlater.thrift.stats import MetricsServer, ServerStats
from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase import delete_cells, get_versions, put_cells, read_columns
from tasks.hbase.reads import scan_rows

if TYPE_CHECKING:
    from tasks.appdata.store import AppData
    from tasks.hbase import ClusterPair


FEED = FOLLOWING_FEED.name


def _scrape(server: MetricsServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def select_one(cursor: Cursor, database: str) -> int:
    cursor.execute("SELECT 1")
    (one,) = cursor.fetchone() or (0,)
    return int(one)


def test_an_hbase_call_and_an_app_data_call_show_up_on_metrics(pair: ClusterPair, appdata: AppData) -> None:
    server = MetricsServer(ServerStats(), "127.0.0.1", 0).start()
    try:
        before = _scrape(server)
        pool = pair.primary
        assert isinstance(pool.run("list tables", lambda connection: connection.tables()), list)
        assert appdata.run(0, select_one) == 1
        after = _scrape(server)
    finally:
        server.stop()

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    hbase = {"store": "hbase", "shard": pool.name, "op": "list tables"}
    assert delta("pinlater_app_store_calls_total", **hbase) == 1
    assert delta("pinlater_app_store_call_seconds_count", **hbase) == 1
    assert delta("pinlater_app_store_call_seconds_bucket", **hbase, le="+Inf") == 1
    mysql = {"store": "mysql", "shard": str(appdata.locate(0).server), "op": "select_one"}
    assert delta("pinlater_app_store_calls_total", **mysql) == 1
    assert delta("pinlater_app_store_call_seconds_sum", **mysql) > 0


def test_what_a_read_is_counted_under_names_no_row_and_no_count(pair: ClusterPair) -> None:
    """Row keys carry what users typed (a typeahead scan starts at the owner
    and the query's token) and counts vary per call: as labels they would
    add a series per request, never dropped, and show private text on
    ``/metrics``. Reads of different rows are counted under one name."""
    pool = pair.primary
    rows = [b"owner-%d\x03secretquery%d" % (i, i) for i in range(3)]
    server = MetricsServer(ServerStats(), "127.0.0.1", 0).start()
    calls = "pinlater_app_store_calls_total"
    try:
        read_columns(pool, FEED, rows[0], family="feed", limit=1)  # the table made first, if it is not yet
        before = _scrape(server)
        for n, row in enumerate(rows, start=1):
            read_columns(pool, FEED, row, family="feed", limit=1)
            scan_rows(pool, FEED, start=row, stop=row + b"\xff", limit=5)
            get_versions(pool, FEED, rows[:n])
            put_cells(pool, FEED, {r: {b"feed:q": b""} for r in rows[:n]}, timestamp=1)
            delete_cells(pool, FEED, {r: [b"feed:q"] for r in rows[:n]}, timestamp=1)
        after = _scrape(server)
    finally:
        server.stop()
    # This test's calls: the series that grew (the process's other tests ran before it, not beside it).
    grew = {dict(labels)["op"]: n - before.get((name, labels), 0.0) for (name, labels), n in after.items()
            if name == calls and dict(labels).get("store") == "hbase" and n > before.get((name, labels), 0.0)}
    assert not [op for op in [*grew, *(dict(labels)["op"] for name, labels in after if name == calls)]
                if "secret" in op or "owner" in op]
    names = {f"read {FEED} row", f"scan {FEED}", f"get versions of rows of {FEED}", f"put cells into {FEED}",
             f"delete versions from {FEED}"}
    assert {op for op in grew if FEED in op} == names  # one each, however many rows and cells
    assert all(grew[op] >= 3 for op in names)
