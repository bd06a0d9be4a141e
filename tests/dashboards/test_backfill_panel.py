"""The Backfills panel (``/api/backfills`` and its card on the page): runs
recorded in the app-data MySQL (made here through ``Records``, no workers),
their progress, rate, time left and state, paused with the ``backfill``
queue; and a clear one-line error, answered at once, when MySQL is down."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from pinlater.settings import hash_secret
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.backfill.panel import BackfillBoard, BackfillPanel
from tasks.backfill.plan import Plan
from tasks.backfill.queue import QUEUE, create_options
from tasks.backfill.records import CANCELLED, FINISHED, Records
from tests.dashboards.http import call
from tests.dashboards.support import Cluster, dashboard_settings
from tests.servers import ensure_services
from tests.support.appdata import ENV
from tests.support.browser import ARTIFACTS
from tests.support.waits import wait_for

ADMIN = "backfill-panel-admin"


@pytest.fixture
def queue(cluster: Cluster) -> Iterator[JobService]:
    svc = JobService.from_settings(dashboard_settings(admin_secret_sha256=hash_secret(ADMIN)), source="bf-panel")
    svc.delete_queue(QUEUE, ADMIN)
    svc.create_queue(QUEUE, **create_options())
    yield svc
    svc.delete_queue(QUEUE, ADMIN)
    cluster.dashboard.collector.invalidate()
    svc.close()


def runs_panel(url: str, check: Any, what: str) -> dict[str, Any]:
    def read() -> dict[str, Any] | None:
        status, body = call(url + "/api/backfills")
        assert status == 200, body
        return body if check(body) else None

    found: dict[str, Any] = wait_for(read, what=what)
    return found


def test_runs_with_progress_state_and_pause(
    cluster: Cluster, queue: JobService, appdata: AppData, browser_context: Any
) -> None:
    records = Records(appdata)
    running = records.create_run("feeds", "primary", Plan(500, {0: 6, 1: 4}))
    for shard, page in ((0, 1), (0, 2), (1, 1)):
        records.start_page(running.id, shard, page)
        records.finish_page(running.id, shard, page, users=500, cells=2000)
    done = records.create_run("feeds", "standby", Plan(500, {0: 1}))
    records.start_page(done.id, 0, 1)
    records.finish_page(done.id, 0, 1, users=10, cells=40)
    assert records.end_run(done.id, FINISHED) and not records.end_run(done.id, CANCELLED)
    with pytest.raises(ValueError, match="a run ends finished, failed, cancelled, not 'running'"):
        records.end_run(running.id, "running")
    board = BackfillBoard(AppDataSettings.from_env(ENV), interval_s=0.3)
    dash = Dashboard(cluster.svc, dashboard_settings(), port=0, refresh_s=0.3, panels=[BackfillPanel(board)]).start()
    try:
        body = runs_panel(dash.url, lambda b: any(r["id"] == running.id for r in b["runs"]), "the runs")
        assert body["error"] is None and body["queue_paused"] is False
        by_id = {r["id"]: r for r in body["runs"]}
        r = by_id[running.id]
        assert (r["kind"], r["cluster"], r["state"], r["pages_done"], r["total_pages"]) == (
            "feeds", "primary", "running", 3, 10)
        assert r["fraction"] == pytest.approx(0.3) and r["users_done"] == 1500 and r["cells"] == 6000
        assert by_id[done.id]["state"] == "finished" and by_id[done.id]["eta_s"] == 0
        queue.pause(QUEUE)
        dash.collector.invalidate()
        body = runs_panel(dash.url, lambda b: b["queue_paused"], "paused")
        assert {r["id"]: r["state"] for r in body["runs"]}[running.id] == "paused"

        page = browser_context.new_page()
        try:
            page.goto(dash.url + "/")
            line = page.locator(f'#backfills tr[data-run="{running.id}"]')
            wait_for(lambda: line.count() == 1, what="the run on the page")
            assert line.locator('[data-field="pages"]').inner_text() == "3 / 10"
            assert line.locator('[data-field="state"]').inner_text() == "paused"
            assert line.locator('[data-field="cluster"]').inner_text() == "primary"
            assert line.locator("progress").get_attribute("value") is not None
            queue.resume(QUEUE)
            dash.collector.invalidate()
            wait_for(lambda: line.locator('[data-field="state"]').inner_text() == "running", what="resumed")
            assert page.locator(f'#backfills tr[data-run="{done.id}"] [data-field="left"]').inner_text() == "done"
            assert page.locator("#backfills-error").is_hidden()
            page.locator("#backfill-panel").screenshot(path=str(ARTIFACTS / "dashboard-backfills.png"))
        finally:
            page.close()
    finally:
        dash.close()


def test_mysql_down_is_one_line_and_the_dashboard_answers_at_once(
    cluster: Cluster, browser_context: Any
) -> None:
    down = AppDataSettings.from_env({**ENV, "PINLATER_APPDATA_SHARDS": "0-3=mysql://pinlater:pinlater@127.0.0.1:9"})
    dash = Dashboard(cluster.svc, dashboard_settings(), port=0, refresh_s=0.3,
                     panels=[BackfillPanel(BackfillBoard(down, interval_s=0.3))]).start()
    try:
        body = runs_panel(dash.url, lambda b: b["error"], "the error")
        assert body["error"].startswith("cannot read the backfill runs: ") and "\n" not in body["error"]
        assert body["runs"] == []
        started = time.monotonic()
        assert call(dash.url + "/api/backfills")[0] == 200
        assert time.monotonic() - started < 1.0
        page = browser_context.new_page()
        try:
            page.goto(dash.url + "/")
            page.wait_for_selector("#backfills-error:not([hidden])")
            assert page.inner_text("#backfills-error").startswith("cannot read the backfill runs: ")
        finally:
            page.close()
    finally:
        dash.close()


def test_app_data_not_made_yet_reads_as_no_runs_not_an_error() -> None:
    """A fresh clone's dashboard (no demo run yet): the app-data databases do
    not exist, which is a store holding nothing yet, not a failure."""
    ensure_services(hbase=False)
    prefix = f"appdata_none_{uuid.uuid4().hex[:8]}_"
    missing = AppDataSettings.from_env({**ENV, "PINLATER_APPDATA_DATABASE_PREFIX": prefix})
    board = BackfillBoard(missing, interval_s=0.3)
    try:
        reading = board.read_once()
        assert (reading.runs, reading.error) == ([], None) and reading.checked_at_ms is not None
    finally:
        board.close()
