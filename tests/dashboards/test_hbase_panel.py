"""The HBase panel (``/api/hbase`` and its card on the page): both real
clusters' health (each one's Thrift1 and Thrift2 server), the feed queues'
numbers as the backend counts them, the fan-out lag, clusters that are
black-holed or refuse connections, Thrift2 servers down while Thrift1 is up
(writes down), and settings that cannot be read. The feed queues have fixed
names: each test starts and ends without them."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dashboards.server import Dashboard
from pinlater import Ack, Job, JobService
from pinlater.settings import hash_secret
from tasks.feeds.panel import HBasePanel
from tasks.feeds.queues import ALL, FANOUT, TRIM, TRIM_SWEEP, WRITE_PRIMARY, WRITE_STANDBY, create_options
from tasks.hbase import HBaseSettings
from tasks.hbase.health import PROBE_TIMEOUT_S, HBaseHealth
from tasks.hbase.settings import Address
from tests.dashboards.http import call
from tests.dashboards.support import Cluster, backend_counts, dashboard_settings
from tests.support.browser import ARTIFACTS
from tests.support.waits import wait_for

ADMIN = "feed-panel-admin"
HOUR_MS = 3_600_000
FANOUT_WAITED_MS = 30_000  # how long ago the oldest fan-out job was due


def now_ms() -> int:
    return int(time.time() * 1000)


def panel(url: str) -> dict[str, Any]:
    status, body = call(url + "/api/hbase")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def probed(url: str, reachable: bool, thrift2: bool | None = None) -> dict[str, Any]:
    """The panel once both clusters' probes have said ``reachable`` of their
    Thrift1 servers and ``thrift2`` (by default the same) of their Thrift2."""
    thrift2 = reachable if thrift2 is None else thrift2

    def check() -> dict[str, Any] | None:
        body = panel(url)
        done = all(c["reachable"] is reachable and c["thrift2"]["reachable"] is thrift2 for c in body["clusters"])
        return body if done else None

    up = {True: "up", False: "down"}
    body: dict[str, Any] = wait_for(check, what=f"both clusters probed: Thrift1 {up[reachable]}, Thrift2 {up[thrift2]}")
    return body


@pytest.fixture
def feeds(cluster: Cluster) -> Iterator[JobService]:
    """A client of the dashboard's stores that may delete queues; no feed queue before or after."""
    svc = JobService.from_settings(dashboard_settings(admin_secret_sha256=hash_secret(ADMIN)), source="feed-panel")

    def drop() -> None:
        for queue in ALL:
            svc.delete_queue(queue, ADMIN)
        cluster.dashboard.collector.invalidate()

    drop()
    yield svc
    drop()
    svc.close()


def load(svc: JobService) -> dict[str, Any]:
    """Jobs on the feed queues (no worker runs them); what the panel should say."""
    for queue in (WRITE_STANDBY, FANOUT, TRIM, TRIM_SWEEP):
        svc.create_queue(queue, **create_options(queue))
    # feed_write_standby: one failed for good, one retry waiting an hour, two
    # running, two due and one scheduled for later. Each dequeue finds only
    # the jobs enqueued just before it.
    svc.enqueue(WRITE_STANDBY, [Job(b"w", attempts_allowed=1)])
    [dead] = svc.dequeue(WRITE_STANDBY, 1)
    svc.ack(WRITE_STANDBY, failed=[Ack(dead.descriptor, "boom")])
    svc.enqueue(WRITE_STANDBY, [Job(b"w", priority=2, attempts_allowed=3)] * 3)
    running = svc.dequeue(WRITE_STANDBY, 3)
    assert len(running) == 3
    retried = running[0]
    svc.ack(WRITE_STANDBY, failed=[Ack(retried.descriptor, "boom", retry_delay_ms=HOUR_MS)])
    svc.enqueue(WRITE_STANDBY, [Job(b"w", priority=3)] * 2 + [Job(b"w", priority=3, run_after_ms=now_ms() + HOUR_MS)])
    # feed_fanout: the oldest due job is at the lowest priority, so every priority counts.
    oldest = now_ms() - FANOUT_WAITED_MS
    svc.enqueue(FANOUT, [Job(b"f", priority=3, run_after_ms=oldest),
                         Job(b"f", priority=1, run_after_ms=oldest + 20_000),
                         Job(b"f", priority=2, run_after_ms=now_ms() + HOUR_MS)])
    # feed_trim: three done, one waiting; feed_trim_sweep: a sweep page running, the next waiting.
    svc.enqueue(TRIM, [Job(b"t")] * 3)
    svc.ack(TRIM, succeeded=[Ack(j.descriptor) for j in svc.dequeue(TRIM, 3)])
    svc.enqueue(TRIM, [Job(b"t")])
    svc.enqueue(TRIM_SWEEP, [Job(b"s")])
    svc.dequeue(TRIM_SWEEP, 1)
    svc.enqueue(TRIM_SWEEP, [Job(b"s")])
    return {"fanout_oldest_ms": oldest}


def expected(svc: JobService, queue: str) -> dict[str, Any]:
    counts = backend_counts(svc, queue)
    return {"queue": queue, "exists": True, "config_error": None, **counts,
            "pending": counts["pending_now"] + counts["pending_future"]}


def test_both_clusters_healthy_and_absent_queues_empty(cluster: Cluster, feeds: JobService) -> None:
    settings = HBaseSettings.from_env()
    body = probed(cluster.url, True)
    assert body["settings_error"] is None and body["partial"] is False
    assert [(c["name"], c["address"]) for c in body["clusters"]] == [
        ("primary", str(settings.primary)), ("standby", str(settings.standby))]
    for c in body["clusters"]:
        assert 0 < c["latency_ms"] < PROBE_TIMEOUT_S * 1000 and c["error"] is None
        assert abs(now_ms() - c["checked_at_ms"]) < 10_000
        # No feed queue exists: empty, not an error.
        assert c["backlog"] == {"queue": c["write_queue"], "exists": False, "config_error": None, "pending_now": 0,
                                "pending_future": 0, "pending": 0, "running": 0, "succeeded": 0, "failed": 0}
    assert body["fanout"]["lag_ms"] == 0 and body["fanout"]["oldest_run_after_ms"] is None
    assert body["trim"]["succeeded"] == 0 and body["trim_sweep"]["exists"] is False


def test_both_thrift2_servers_healthy(cluster: Cluster) -> None:
    settings = HBaseSettings.from_env()
    body = probed(cluster.url, True)
    assert [(c["name"], c["thrift2"]["address"]) for c in body["clusters"]] == [
        ("primary", str(settings.primary_thrift2)), ("standby", str(settings.standby_thrift2))]
    for c in body["clusters"]:
        thrift2 = c["thrift2"]
        assert thrift2["reachable"] is True and thrift2["error"] is None
        assert 0 <= thrift2["latency_ms"] < PROBE_TIMEOUT_S * 1000
        assert abs(now_ms() - thrift2["checked_at_ms"]) < 10_000


def test_backlog_fanout_lag_and_trims(cluster: Cluster, feeds: JobService) -> None:
    oldest = load(feeds)["fanout_oldest_ms"]
    cluster.dashboard.collector.invalidate()
    body = panel(cluster.url)
    primary, standby = body["clusters"]
    assert primary["write_queue"] == WRITE_PRIMARY and primary["backlog"]["exists"] is False
    assert standby["write_queue"] == WRITE_STANDBY
    assert standby["backlog"] == expected(feeds, WRITE_STANDBY)
    assert {k: standby["backlog"][k] for k in ("pending_now", "pending_future", "pending", "running", "failed")} == {
        "pending_now": 2, "pending_future": 2, "pending": 4, "running": 2, "failed": 1}

    fanout = body["fanout"]
    assert {k: fanout[k] for k in ("pending_now", "pending_future", "running")} == {
        "pending_now": 2, "pending_future": 1, "running": 0}
    assert fanout["oldest_run_after_ms"] == oldest
    # The age of the oldest due job when the snapshot was taken (the shard's clock, this host's).
    assert FANOUT_WAITED_MS <= fanout["lag_ms"] <= now_ms() - oldest + 50

    assert body["trim"] == expected(feeds, TRIM) and body["trim"]["succeeded"] == 3
    assert body["trim_sweep"] == expected(feeds, TRIM_SWEEP)
    assert (body["trim_sweep"]["pending"], body["trim_sweep"]["running"]) == (1, 1)


def test_the_page_shows_the_panel_and_keeps_it_current(
    cluster: Cluster, feeds: JobService, browser_context: Any
) -> None:
    load(feeds)
    cluster.dashboard.collector.invalidate()
    page = browser_context.new_page()
    try:
        page.goto(cluster.url + "/")
        card = page.locator('#hbase [data-cluster="standby"]')
        wait_for(lambda: card.locator('[data-field="health"]').inner_text() == "up", what="standby shown up")
        assert page.locator('#hbase [data-cluster="primary"] [data-field="health"]').inner_text() == "up"
        assert card.locator('[data-field="latency"]').inner_text().startswith("latency ")
        wait_for(lambda: card.locator('[data-field="verdict"]').inner_text() == "up", what="standby's Thrift2 up")
        assert card.locator('[data-field="thrift2-health"]').inner_text() == "up"
        assert card.locator('[data-field="thrift2-latency"]').inner_text().startswith("latency ")
        pending = card.locator('[data-field="pending_now"] b')
        wait_for(lambda: pending.inner_text() == "2", what="standby backlog on the page")
        assert card.locator('[data-field="failed"] b').inner_text() == "1"
        lag = page.inner_text('#hbase [data-feed="lag"] .value')
        assert lag.endswith("s") and 30 <= int(lag.rstrip("s")) < 60, lag
        assert page.inner_text('#hbase [data-feed="trims"] .value') == "3"
        assert page.inner_text('#hbase [data-feed="sweep"] .value') == "in progress"
        # The page updates itself, like the rest of it.
        feeds.enqueue(WRITE_STANDBY, [Job(b"w", priority=3)] * 5)
        wait_for(lambda: pending.inner_text() == "7", what="the page catches up")
        page.locator("#hbase").screenshot(path=str(ARTIFACTS / "dashboard-hbase.png"))
    finally:
        page.close()


@pytest.fixture
def dead_clusters() -> Iterator[HBaseSettings]:
    """A primary whose Thrift1 and Thrift2 ports accept connections and never
    answer, a standby whose ports refuse them."""
    with socket.socket() as hole, socket.socket() as refused:
        hole.bind(("127.0.0.1", 0))
        # Never accepted, so every probe's connection stays queued: once the
        # backlog is full, connects would fail instead of timing out.
        hole.listen(128)
        refused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        black_holed = Address("127.0.0.1", hole.getsockname()[1])
        closed = Address("127.0.0.1", refused.getsockname()[1])
        yield HBaseSettings(primary=black_holed, primary_thrift2=black_holed, standby=closed, standby_thrift2=closed)


def timed_get(url: str) -> float:
    started = time.monotonic()
    status, body = call(url)
    assert status == 200, body
    return time.monotonic() - started


def test_dead_clusters_show_down_and_the_dashboard_answers_at_once(
    cluster: Cluster, dead_clusters: HBaseSettings, browser_context: Any
) -> None:
    dash = Dashboard(cluster.svc, dashboard_settings(), port=0, refresh_s=0.5,
                     panels=[HBasePanel(HBaseHealth(dead_clusters, interval_s=0.5))]).start()
    try:
        body = probed(dash.url, False)
        primary, standby = body["clusters"]
        assert primary["error"].startswith(f"hbase primary ({dead_clusters.primary}): list tables: timed out")
        assert standby["error"].startswith(f"hbase standby ({dead_clusters.standby}): list tables: ")
        assert "Could not connect" in standby["error"] or "refused" in standby["error"]
        assert primary["thrift2"]["error"].startswith(f"hbase primary ({dead_clusters.primary_thrift2}): server type: "
                                                      "timed out")
        assert standby["thrift2"]["error"].startswith(f"hbase standby ({dead_clusters.standby_thrift2}): server type: ")
        assert "Could not connect" in standby["thrift2"]["error"] or "refused" in standby["thrift2"]["error"]
        for server in [*body["clusters"], *(c["thrift2"] for c in body["clusters"])]:
            assert "\n" not in server["error"] and server["latency_ms"] is None
        # Probes wait out their timeout in their own threads; requests never do.
        for _ in range(3):
            dash.collector.invalidate()
            assert timed_get(dash.url + "/api/overview") < PROBE_TIMEOUT_S / 2
            assert timed_get(dash.url + "/api/hbase") < PROBE_TIMEOUT_S / 2
        page = browser_context.new_page()
        try:
            page.goto(dash.url + "/")
            card = page.locator('#hbase [data-cluster="primary"]')
            wait_for(lambda: card.locator('[data-field="health"]').inner_text() == "down", what="page shows down")
            assert "timed out" in card.locator('[data-field="error"]').inner_text()
            wait_for(lambda: card.locator('[data-field="verdict"]').inner_text() == "down", what="both servers down")
            assert card.locator('[data-field="thrift2-health"]').inner_text() == "down"
            assert "timed out" in card.locator('[data-field="thrift2-error"]').inner_text()
            page.locator("#hbase").screenshot(path=str(ARTIFACTS / "dashboard-hbase-down.png"))
        finally:
            page.close()
    finally:
        started = time.monotonic()
        dash.close()
    assert time.monotonic() - started < PROBE_TIMEOUT_S + 1.5


def test_unusable_settings_show_the_reason(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, browser_context: Any
) -> None:
    monkeypatch.setenv("PINLATER_HBASE_PRIMARY", "nonsense")
    dash = Dashboard(cluster.svc, dashboard_settings(), port=0).start()
    reason = "PINLATER_HBASE_PRIMARY: must look like HOST:PORT with a port from 1 to 65535, got 'nonsense'"
    try:
        body = panel(dash.url)
        assert body["settings_error"] == reason
        assert [c["reachable"] for c in body["clusters"]] == [None, None]
        assert [c["thrift2"] for c in body["clusters"]] == [
            {"address": None, "reachable": None, "latency_ms": None, "error": None, "checked_at_ms": None}] * 2
        assert body["fanout"]["lag_ms"] == 0  # the queues' numbers do not need HBase
        assert call(dash.url + "/api/overview")[0] == 200
        page = browser_context.new_page()
        try:
            page.goto(dash.url + "/")
            page.wait_for_selector("#hbase-settings-error:not([hidden])")
            assert page.inner_text("#hbase-settings-error") == "HBase settings unusable: " + reason
            for field in ("health", "thrift2-health", "verdict"):
                assert page.inner_text(f'#hbase [data-cluster="primary"] [data-field="{field}"]') == "unknown"
        finally:
            page.close()
    finally:
        dash.close()


def test_thrift2_down_reads_as_writes_down(
    cluster: Cluster, dead_clusters: HBaseSettings, browser_context: Any
) -> None:
    """The real Thrift1 servers with dead Thrift2 ones: each cluster still
    serves reads, but takes no writes, and the page says so."""
    settings = dataclasses.replace(HBaseSettings.from_env(), primary_thrift2=dead_clusters.primary_thrift2,
                                   standby_thrift2=dead_clusters.standby_thrift2)
    dash = Dashboard(cluster.svc, dashboard_settings(), port=0, refresh_s=0.5,
                     panels=[HBasePanel(HBaseHealth(settings, interval_s=0.5))]).start()
    try:
        body = probed(dash.url, True, thrift2=False)
        primary, standby = body["clusters"]
        assert primary["error"] is None and standby["error"] is None
        assert primary["thrift2"]["error"].startswith(f"hbase primary ({settings.primary_thrift2}): server type: "
                                                      "timed out")
        assert standby["thrift2"]["error"].startswith(f"hbase standby ({settings.standby_thrift2}): server type: ")
        assert timed_get(dash.url + "/api/hbase") < PROBE_TIMEOUT_S / 2
        page = browser_context.new_page()
        try:
            page.goto(dash.url + "/")
            cards = [page.locator(f'#hbase [data-cluster="{name}"]') for name in ("primary", "standby")]

            def writes_down() -> bool:
                return all(card.locator('[data-field="verdict"]').inner_text() == "writes down" for card in cards)

            wait_for(writes_down, what="both clusters shown writes down")
            for card in cards:
                assert card.locator('[data-field="health"]').inner_text() == "up"
                assert card.locator('[data-field="thrift2-health"]').inner_text() == "down"
                assert card.locator('[data-field="latency"]').inner_text().startswith("latency ")
            assert "timed out" in cards[0].locator('[data-field="thrift2-error"]').inner_text()
            page.locator("#hbase").screenshot(path=str(ARTIFACTS / "dashboard-hbase-writes-down.png"))
        finally:
            page.close()
    finally:
        dash.close()
