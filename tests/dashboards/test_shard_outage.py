"""One of two Redis shards stops: the dashboard keeps working, says the
shard is down, and shows the other shard's numbers; when the shard comes
back, so do its numbers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dashboards.server import Dashboard
from pinlater import Job, JobService
from pinlater.settings import parse_shards
from tests.dashboards.http import call
from tests.dashboards.support import STATE_QUERIES, TOKEN, Cluster, dashboard_settings, run_workload
from tests.servers import REDIS_PORTS, PrivateRedis, redis_db, redis_url
from tests.support.browser import ARTIFACTS
from tests.support.waits import wait_for

# The shard that stops is a Redis of this module's own, so the test runs
# beside the others; the first shard and the control store are dbs of its own.
SHARD_DB, CONTROL_DB = redis_db(5), redis_db(6)


@pytest.fixture(scope="module")
def cluster(private_redis: PrivateRedis) -> Iterator[Cluster]:
    urls = [redis_url(REDIS_PORTS[0], SHARD_DB), redis_url(private_redis.port, SHARD_DB),
            redis_url(REDIS_PORTS[0], CONTROL_DB)]
    for url in urls:
        redis.Redis.from_url(url).flushdb()
    settings = dashboard_settings(shards=parse_shards(f"r1={urls[0]},r2={urls[1]}"), control_url=urls[2])
    svc = JobService.from_settings(settings, source="dashboard-outage-test")
    work = run_workload(svc, f"outage_{uuid.uuid4().hex[:8]}", scale=5)
    dashboard = Dashboard.from_settings(settings, port=0, refresh_s=0.5).start()
    yield Cluster(svc, dashboard, work)
    dashboard.close()
    svc.close()


def overview(c: Cluster) -> dict[str, Any]:
    status, snap = call(c.url + "/api/overview")
    assert status == 200, snap
    return snap  # type: ignore[no-any-return]


def test_dashboard_keeps_working_while_a_shard_is_down(
    cluster: Cluster, private_redis: PrivateRedis, browser_context: Any
) -> None:
    svc = cluster.svc
    queue = cluster.work.queue
    for _ in range(100):  # enqueue picks a shard at random per call: make sure both have jobs
        by_shard = svc.operators.count_by_shard(queue)
        if by_shard["r1"]["pending"] and by_shard["r2"]["pending"]:
            break
        svc.enqueue(queue, [Job(b"more")] * 10)
    assert by_shard["r1"]["pending"] and by_shard["r2"]["pending"], by_shard
    r1 = {key: by_shard["r1"]["pending" if key == "pending_now" else key] for key in STATE_QUERIES}

    page = browser_context.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(cluster.url + "/")
    row = page.locator(f'#queues tr[data-queue="{queue}"]')
    row.wait_for()
    private_redis.stop()
    try:
        snap = wait_for(lambda: (s := overview(cluster))["shards_down"] == ["r2"] and s, what="r2 marked down")
        assert snap["partial"] is True
        [shard] = [s for s in snap["shards"] if s["id"] == "r2"]
        assert shard["healthy"] is False and shard["counts"] is None and shard["last_error"]
        [q] = [q for q in snap["queues"] if q["name"] == queue]
        assert q["counts"] == r1 and set(q["by_shard"]) == {"r1"}
        metrics = call(cluster.url + "/metrics")[1]
        assert 'pinlater_shard_up{shard="r2"} 0' in metrics and 'pinlater_shard_up{shard="r1"} 1' in metrics

        # A job list and the counts an operator confirms a bulk action by say what they leave out.
        status, listed = call(f"{cluster.url}/api/jobs?queue={queue}&state=pending&limit=1000")
        assert status == 200 and listed["partial"] is True and listed["shards_skipped"] == ["r2"]
        assert {j["descriptor"].split(":")[1] for j in listed["jobs"]} == {"sr1"}
        assert len(listed["jobs"]) == r1["pending_now"]
        status, preview = call(f"{cluster.url}/api/queues/{queue}/retry-failed", {"dry_run": True}, token=TOKEN)
        assert status == 200 and preview == {"dry_run": True, "would_affect": min(r1["failed"], 1000),
                                             "matching": r1["failed"], "partial": True, "shards_skipped": ["r2"]}
        status, preview = call(f"{cluster.url}/api/queues/{queue}/delete-jobs",
                               {"state": "running", "dry_run": True}, token=TOKEN)
        assert status == 200 and preview["matching"] == r1["running"] and preview["shards_skipped"] == ["r2"]

        # The page says so, and still shows r1's numbers.
        card = page.locator('#shards [data-shard="r2"]')
        wait_for(lambda: card.locator('[data-field="health"]').inner_text() == "down", what="page marks r2 down")
        assert "r2 down" in page.inner_text("#banner")
        assert page.inner_text("#cluster-status") == "1/2 shards up"
        failed = row.locator('td[data-field="failed"]')
        assert int(failed.inner_text().replace(",", "")) == r1["failed"]
        page.select_option("#jobs-queue", queue)
        page.select_option("#jobs-state", "pending")
        page.click("#btn-jobs")
        page.wait_for_selector("#jobs-partial:not([hidden])")
        assert page.inner_text("#jobs-partial") == "Shard r2 is out of rotation: its jobs are left out."
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / "dashboard-shard-down.png"))
    finally:
        private_redis.start()
    wait_for(lambda: overview(cluster)["shards_down"] == [], timeout_s=20, what="r2 back")
    assert next(q for q in overview(cluster)["queues"] if q["name"] == queue)["counts"]["pending_now"] == (
        by_shard["r1"]["pending"] + by_shard["r2"]["pending"]
    )
    wait_for(lambda: page.inner_text("#cluster-status") == "2/2 shards up", what="page shows r2 back")
    page.click("#btn-jobs")
    page.wait_for_selector("#jobs-partial[hidden]", state="attached")
    page.close()
    status, listed = call(f"{cluster.url}/api/jobs?queue={queue}&state=pending&limit=1000")
    assert listed["partial"] is False and listed["shards_skipped"] == []
    assert len(listed["jobs"]) == by_shard["r1"]["pending"] + by_shard["r2"]["pending"]


def test_overview_is_partial_while_the_queue_list_cannot_be_read(private_redis: PrivateRedis) -> None:
    """A dashboard that starts while its control store is down knows no
    queue: its zeros are flagged as partial, not shown as the truth."""
    shard = redis_url(REDIS_PORTS[0], SHARD_DB)
    settings = dashboard_settings(shards=parse_shards(f"r1={shard}"),
                                  control_url=redis_url(private_redis.port, CONTROL_DB), socket_timeout_s=0.5)
    private_redis.stop()
    try:
        dashboard = Dashboard.from_settings(settings, port=0, refresh_s=0.5).start()
        try:
            status, snap = call(dashboard.url + "/api/overview")
            assert status == 200 and snap["queues"] == [] and snap["shards_down"] == []
            assert snap["control_store"]["ok"] is False and snap["control_store"]["error"].startswith("queue configs")
            assert snap["partial"] is True
        finally:
            dashboard.close()
    finally:
        private_redis.start()


def test_queues_whose_config_the_control_store_lost_are_named_and_left_out(
    cluster: Cluster, browser_context: Any
) -> None:
    """The control store comes back without a queue's config: the queue's
    jobs, still on both shards, are in no number, so the overview is
    partial and names it, and the page says what to run, until it is
    registered again."""
    svc = cluster.svc
    name = f"lost_{uuid.uuid4().hex[:8]}"
    svc.create_queue(name, priorities=2)
    for _ in range(20):  # one call each: both shards get some
        svc.enqueue(name, [Job(b"kept", priority=2)])
    wait_for(lambda: (s := overview(cluster))["shards_down"] == [] and any(q["name"] == name for q in s["queues"]),
             timeout_s=20, what="both shards and the queue shown")
    assert overview(cluster)["unregistered_queues"] == []
    page = browser_context.new_page()
    page.goto(cluster.url + "/")
    page.locator(f'#queues tr[data-queue="{name}"]').wait_for()

    svc.core.control.delete_queue(name)  # its config lost; the shards keep its jobs
    snap = wait_for(lambda: (s := overview(cluster))["unregistered_queues"] and s, what="the queue found unregistered")
    [lost] = snap["unregistered_queues"]
    assert (lost["name"], lost["priorities"], sorted(lost["shards"])) == (name, 2, ["r1", "r2"])
    assert snap["partial"] is True and name not in {q["name"] for q in snap["queues"]}
    wait_for(lambda: "pinlater restore-queues" in page.inner_text("#banner"), what="the page's banner")
    assert f"{name} on " in page.inner_text("#banner")

    svc.operators.restore_queues([name], paused=False)
    snap = wait_for(lambda: not (s := overview(cluster))["unregistered_queues"] and s, what="registered again")
    [q] = [q for q in snap["queues"] if q["name"] == name]
    assert q["counts"]["pending_now"] == 20 and snap["partial"] is False
    wait_for(lambda: "restore-queues" not in page.inner_text("#banner"), what="the banner gone")
    page.close()
