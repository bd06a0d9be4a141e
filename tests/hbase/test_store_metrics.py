"""The apps' calls to their stores, a real HBase cluster's and the app-data
MariaDB's, are counted on ``/metrics`` of the process that made them, as
the job service's store calls are (``pinlater.observe.seam``)."""

from __future__ import annotations

import urllib.request
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families
from pymysql.cursors import Cursor

from pinlater.thrift.stats import MetricsServer, ServerStats

if TYPE_CHECKING:
    from tasks.appdata.store import AppData
    from tasks.hbase import ClusterPair


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
