"""The page in headless Chromium: its numbers are the backend's, its
controls work (and are refused without the token), it updates live, and it
fetches nothing from anywhere but the dashboard."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from pinlater import Checkpoint, Job, JobState
from pinlater.errors import DequeueRateLimited
from pinlater.stores.redis.keys import CONTROL_QUEUES
from tests.dashboards.support import (
    STATE_QUERIES,
    TOKEN,
    UNREADABLE,
    WORK,
    Cluster,
    backend_counts,
    clear_of_minute_end,
    plant_odd_queues,
    restore,
    run_known_work,
)
from tests.support.browser import ARTIFACTS
from tests.support.waits import wait_for


def number(text: str) -> int:
    return int(text.replace(",", "").strip())


@pytest.fixture
def page(browser_context: Any, cluster: Cluster) -> Iterator[Any]:
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(cluster.url + "/")
    page.wait_for_selector(f'#queues tr[data-queue="{cluster.work.queue}"]')
    yield page
    page.close()
    outside = [u for u in requests if not u.startswith(cluster.url) and not u.startswith("data:")]
    assert not outside, f"the page fetched from elsewhere: {outside}"
    assert not errors, f"JavaScript errors: {errors}"


def row_counts(page: Any, queue: str) -> dict[str, int]:
    row = page.locator(f'#queues tr[data-queue="{queue}"]')
    return {key: number(row.locator(f'td[data-field="{key}"]').inner_text()) for key in STATE_QUERIES}


def sign_in(page: Any, token: str = TOKEN, name: str = "Pat Operator") -> None:
    if not page.locator("#auth").evaluate("details => details.open"):  # the page may have opened it already
        page.click("#auth-summary")
    page.fill("#operator", name)
    page.fill("#token", token)
    page.click("#save-auth")


def open_queue(page: Any, queue: str) -> None:
    page.click(f'#queues tr[data-queue="{queue}"] td[data-field="name"] button')
    page.wait_for_selector("#detail:not([hidden])")


def confirm(page: Any, expect: str, screenshot: str | None = None) -> str:
    page.wait_for_selector("#confirm[open]")
    text: str = page.inner_text("#confirm-text")
    assert expect in text, text
    if screenshot:
        page.screenshot(path=str(ARTIFACTS / screenshot))
    page.click("#confirm-ok")
    return text


def test_page_numbers_equal_the_backend_counts(page: Any, cluster: Cluster) -> None:
    svc, queue = cluster.svc, cluster.work.queue
    cluster.dashboard.collector.invalidate()
    expected = backend_counts(svc, queue)
    assert expected["failed"] > 0 and expected["running"] > 0 and expected["pending_future"] > 0
    wait_for(lambda: row_counts(page, queue) == backend_counts(svc, queue), what="queue row == backend")
    # Totals over every queue, per shard, and per priority in the detail panel.
    totals = {key: number(page.inner_text(f'[data-total="{key}"] .value')) for key in STATE_QUERIES}
    every_queue = [backend_counts(svc, q) for q in svc.queue_names()]
    assert totals == {key: sum(c[key] for c in every_queue) for key in STATE_QUERIES}
    by_shard = svc.operators.count_by_shard(queue)
    for shard in ("r1", "r2"):
        card = page.locator(f'#shards [data-shard="{shard}"]')
        assert card.locator('[data-field="health"]').inner_text() == "up"
        assert number(card.locator('[data-field="failed"] b').inner_text()) == by_shard[shard]["failed"]
        assert number(card.locator('[data-field="running"] b').inner_text()) == by_shard[shard]["running"]
    open_queue(page, queue)
    for p in (1, 2, 3):
        row = page.locator(f'#detail-priorities tr[data-row="p{p}"]')
        shown = {key: number(row.locator(f'td[data-field="{key}"]').inner_text()) for key in STATE_QUERIES}
        assert shown == backend_counts(svc, queue, p), p
    assert "unlimited" in page.inner_text(f'#queues tr[data-queue="{queue}"] td[data-field="rate"]')
    assert page.inner_text("#cluster-status") == "2/2 shards up"
    assert page.locator("#flower-link").is_hidden()  # not signed in: the server does not say where Flower is

    # Screenshots for people: the whole page at 1280x800, and on a narrow 800px screen.
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "dashboard-1280x800.png"))
    page.screenshot(path=str(ARTIFACTS / "dashboard-1280-full.png"), full_page=True)
    page.set_viewport_size({"width": 800, "height": 1000})
    page.evaluate("window.scrollTo(0, 0)")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 800, f"the page is {width}px wide on an 800px screen (tables should scroll inside their cards)"
    page.screenshot(path=str(ARTIFACTS / "dashboard-800.png"), full_page=True)


def test_a_control_without_the_token_is_refused(page: Any, cluster: Cluster) -> None:
    queue = cluster.work.queue
    open_queue(page, queue)
    page.click("#btn-pause")  # not signed in: the page says so and sends nothing
    page.wait_for_selector("#toast:not([hidden])")
    assert "operator token" in page.inner_text("#toast")
    sign_in(page, token="not-the-token")
    page.click("#btn-pause")
    confirm(page, "Pause")
    wait_for(lambda: "refused" in page.inner_text("#toast"), what="refusal toast")
    assert "wrong operator token" in page.inner_text("#toast")
    assert cluster.svc.queue_config(queue, fresh=True).paused is False


def test_the_flower_link_shows_once_signed_in(page: Any, cluster: Cluster) -> None:
    assert page.locator("#flower-link").is_hidden()
    sign_in(page, token="not-the-token")
    page.wait_for_timeout(500)  # the page asks for its config again
    assert page.locator("#flower-link").is_hidden()
    sign_in(page)
    page.wait_for_selector("#flower-link:not([hidden])")
    assert page.get_attribute("#flower-link", "href") == "http://127.0.0.1:5555"
    page.click("#auth-summary")
    page.click("#forget-auth")
    page.wait_for_selector("#flower-link[hidden]", state="attached")


def test_pausing_from_the_page_stops_dequeues(page: Any, cluster: Cluster) -> None:
    svc, queue = cluster.svc, cluster.work.queue
    sign_in(page)
    open_queue(page, queue)
    page.click("#btn-pause")
    confirm(page, f"Pause {queue}?")
    rate_cell = f'#queues tr[data-queue="{queue}"] td[data-field="rate"]'
    wait_for(lambda: page.inner_text(rate_cell) == "paused", what="rate cell says paused")
    assert svc.queue_config(queue, fresh=True).paused is True
    with pytest.raises(DequeueRateLimited):
        svc.dequeue(queue, 10)  # fresh=True above refreshed this client's cached config
    entry = page.locator("#audit tbody tr").nth(1)  # row 0 is the header
    wait_for(lambda: "pause" in entry.inner_text() and "Pat Operator" in entry.inner_text(), what="audit row")

    page.click("#btn-resume")
    confirm(page, f"Resume {queue}")
    wait_for(lambda: page.inner_text(rate_cell) == "unlimited", what="rate cell says unlimited")
    assert svc.queue_config(queue, fresh=True).paused is False
    [job] = svc.dequeue(queue, 1)
    svc.checkpoint(queue, [Checkpoint(job.descriptor, move_to_pending=True)])  # leave the counts as they were


def test_a_concurrency_cap_set_from_the_page_shows_beside_the_running_count(page: Any, cluster: Cluster) -> None:
    svc, queue = cluster.svc, cluster.work.queue
    sign_in(page)
    open_queue(page, queue)
    page.fill("#cap-input", "0")
    page.click("#btn-cap")
    wait_for(lambda: "whole number of jobs from 1" in page.inner_text("#toast"), what="the cap refused in the page")
    page.fill("#cap-input", "6")
    page.click("#btn-cap")
    confirm(page, f"at most 6 jobs of {queue}")
    running_cell = f'#queues tr[data-queue="{queue}"] td[data-field="running"]'
    wait_for(lambda: page.inner_text(running_cell).endswith(" / 6"), what="running cell shows the cap")
    assert svc.queue_config(queue, fresh=True).max_running == 6
    wait_for(lambda: "at most 6 running at once" in page.inner_text("#detail-config"), what="detail shows the cap")
    page.fill("#cap-input", "")
    page.click("#btn-cap")
    confirm(page, f"any number of jobs of {queue}")
    wait_for(lambda: " / " not in page.inner_text(running_cell), what="running cell without a cap")
    assert svc.queue_config(queue, fresh=True).max_running is None


def test_retry_failed_from_the_page_moves_failed_jobs_back(page: Any, cluster: Cluster) -> None:
    svc, queue = cluster.svc, cluster.work.queue
    before = backend_counts(svc, queue)
    assert before["failed"] == cluster.work.failed_final > 0
    sign_in(page)
    open_queue(page, queue)
    page.fill("#retry-limit", "10000")
    page.fill("#retry-attempts", "2")
    page.click("#btn-retry")
    text = confirm(page, "failed job(s)", screenshot="dashboard-confirm-retry.png")
    assert f"Move {before['failed']:,} failed job(s)" in text  # the dry run counted them
    wait_for(lambda: "retried" in page.inner_text("#toast"), what="result toast")
    assert f"retried: {before['failed']}" in page.inner_text("#toast")
    after = backend_counts(svc, queue)
    assert after["failed"] == 0
    assert after["pending_now"] == before["pending_now"] + before["failed"]
    # The page catches up by itself (no reload): failed goes to 0 in the table.
    wait_for(lambda: row_counts(page, queue) == after, what="page shows the retried jobs as pending")
    retried = svc.scan(queue, "pending", limit=5).jobs
    assert all(j.attempts_allowed == 2 for j in retried)


def test_jobs_view_and_lookup_show_bodies_only_on_request(page: Any, cluster: Cluster) -> None:
    queue = cluster.work.queue
    page.select_option("#jobs-queue", queue)
    page.select_option("#jobs-state", "running")
    page.click("#btn-jobs")
    first = page.locator("#jobs tr[data-descriptor]").first
    first.wait_for()
    assert page.locator("#jobs tr[data-descriptor]").count() == 25
    descriptor = first.get_attribute("data-descriptor")
    assert "dashboard-test" in first.inner_text()  # claimed by
    page.fill("#lookup-descriptor", descriptor)
    page.click("#btn-lookup")
    page.wait_for_selector("#job-detail:not([hidden])")
    assert page.locator("#job-body").count() == 0  # no body until asked
    page.click("#job-detail button")
    page.wait_for_selector("#job-body")
    body = page.inner_text("#job-body")
    assert body.startswith(("once-", "retry-")), body


def test_the_page_shows_every_queue_whatever_its_stored_config(page: Any, cluster: Cluster) -> None:
    """NaN, Infinity, 1e309 or a negative rate in the control store, and a
    config that cannot be read: every queue still has its row, the odd ones
    say so, and the others keep their numbers."""
    svc, queue = cluster.svc, cluster.work.queue
    r = redis.Redis.from_url(svc.settings.resolved_control_url)
    planted = plant_odd_queues(svc, lambda name, text: r.hset(CONTROL_QUEUES, name, text))
    try:
        cluster.dashboard.collector.invalidate()
        for name in planted:
            page.wait_for_selector(f'#queues tr[data-queue="{name}"]')
        wait_for(lambda: row_counts(page, queue) == backend_counts(svc, queue), what="workload row == backend")
        [unreadable] = [n for n, text in planted.items() if text == UNREADABLE]
        row = page.locator(f'#queues tr[data-queue="{unreadable}"]')
        assert row.locator('td[data-field="rate"]').inner_text() == "config error"
        assert row.locator('td[data-field="failed"]').inner_text() == "—"  # not known, not 0
        for name in planted:
            rate = page.inner_text(f'#queues tr[data-queue="{name}"] td[data-field="rate"]')
            assert "NaN" not in rate and "Infinity" not in rate, (name, rate)
        open_queue(page, unreadable)
        page.wait_for_selector("#detail-config-error:not([hidden])")
        assert "cannot be read" in page.inner_text("#detail-config-error")
        page.screenshot(path=str(ARTIFACTS / "dashboard-odd-configs.png"), full_page=True)
    finally:
        restore(svc, planted)
        r.close()


def chart_texts(page: Any, queue: str) -> tuple[int, str, str]:
    """The taken_at_ms of the answer the charts were drawn from, and the
    queue's chart's aria-label and y-axis label, read together (the page
    redraws on every refresh)."""
    taken, label, y_max = page.evaluate("""q => {
        const svg = document.querySelector(`#rate-charts figure[data-queue="${q}"] svg`);
        return [Number(document.getElementById("rate-charts").dataset.takenAtMs), svg.getAttribute("aria-label"),
                svg.querySelector('[data-field="y-max"]').textContent];
    }""", queue)
    return int(taken), str(label), str(y_max)


def polyline_points(chart: Any) -> dict[str, list[tuple[float, float]]]:
    lines = chart.locator("polyline")
    return {lines.nth(i).get_attribute("data-event"): [
        (float(x), float(y)) for x, y in (p.split(",") for p in lines.nth(i).get_attribute("points").split())
    ] for i in range(lines.count())}


def test_rate_charts_draw_what_the_api_says(page: Any, cluster: Cluster) -> None:
    queue, quiet = f"rates_{uuid.uuid4().hex[:8]}", f"a_quiet_{uuid.uuid4().hex[:6]}"
    answers: dict[int, Any] = {}  # taken_at_ms -> /api/rates answer, as the page received it
    page.on("response", lambda r: "/api/rates" in r.url and r.ok and answers.setdefault(0, []).append(r))
    clear_of_minute_end()
    run_known_work(cluster.svc, queue)
    cluster.svc.create_queue(quiet, priorities=1)
    cluster.dashboard.collector.invalidate()
    chart = page.locator(f'#rate-charts figure[data-queue="{queue}"]')
    chart.wait_for()

    points = polyline_points(chart)
    assert sorted(points) == ["dequeued", "enqueued", "failed", "succeeded"]
    assert all(len(p) == 60 for p in points.values())
    ticks = chart.locator("svg text").all_text_contents()
    assert "\u221260 min" in ticks and "now" in ticks

    taken, label, y_max_text = chart_texts(page, queue)
    by_time = {r.json()["taken_at_ms"]: r.json() for r in answers[0]}
    assert taken in by_time, "the chart was drawn from an answer the page did not fetch"
    [q] = [q for q in by_time[taken]["queues"] if q["name"] == queue]
    # "rates_x: latest minute enqueued 0.55/s, ...; last hour: 30 enqueued, 20 dequeued, ..."
    latest = dict((e, float(x)) for e, x in re.findall(r"(\w+) ([0-9.]+)/s", label.split(";")[0]))
    totals = {e: int(n.replace(",", "")) for n, e in re.findall(r"(\d[\d,]*) ([a-z]+)", label.split(";")[1])}
    assert totals == q["events"] == WORK
    assert latest.keys() == WORK.keys()
    for event, rate in latest.items():
        # Shown with 2 decimals below 10/s and 1 above (early in a minute 30 events make ~15/s).
        shown = 0.006 if rate < 10 else 0.06
        assert rate == pytest.approx(q["rates"][event][-1], abs=shown), event
    y_max = float(y_max_text.removesuffix("/s"))
    assert y_max >= max(max(s) for s in q["rates"].values()) > 0
    # Drawn to scale: the enqueued line's last point is the highest point of all
    # (the smallest y), and before this minute every line lies on the baseline.
    baseline = points["enqueued"][0][1]
    assert points["enqueued"][-1][1] == min(y for p in points.values() for _, y in p) < baseline
    assert {y for p in points.values() for _, y in p[:-1]} == {baseline}

    still = page.locator(f'#rate-charts figure[data-queue="{quiet}"]')
    still.wait_for()
    assert "no events in the last hour" in still.inner_text()
    assert len({y for p in polyline_points(still).values() for _, y in p}) == 1  # flat
    _, quiet_label, _ = chart_texts(page, quiet)
    assert "latest minute enqueued 0/s, dequeued 0/s, succeeded 0/s, failed 0/s" in quiet_label
    page.locator("#rates").scroll_into_view_if_needed()  # the section stays; its charts are redrawn
    page.locator("#rates").screenshot(path=str(ARTIFACTS / "dashboard-rates.png"))


def test_key_limits_and_a_cancel_from_the_page(page: Any, cluster: Cluster) -> None:
    svc = cluster.svc
    queue = f"dash_keys_{uuid.uuid4().hex[:8]}"  # its own queue: the workload's counts stay as they are
    svc.create_queue(queue)
    svc.update_queue(queue, unique_succeeded_ms=60_000)
    [pending, running] = svc.enqueue(queue, [Job(b"cancel-me", priority=2), Job(b"cancel-me-too")])
    [job] = svc.dequeue(queue, 1)
    assert job.descriptor == running
    try:
        sign_in(page)
        wait_for(lambda: page.locator(f'#queues tr[data-queue="{queue}"]').count() == 1, what="the new queue's row")
        open_queue(page, queue)
        page.fill("#key-cap-input", "0")
        page.click("#btn-key-limits")
        wait_for(lambda: "A key's cap must be a whole number" in page.inner_text("#toast"), what="a bad cap refused")
        page.fill("#key-cap-input", "2")
        page.fill("#key-rate-input", "2.5")
        page.click("#btn-key-limits")
        confirm(page, f"Let each fairness key of {queue} run at most 2 jobs at once and start at most 2.5 jobs/s")
        wait_for(lambda: "at most 2 of a key running at once" in page.inner_text("#detail-config"),
                 what="the detail shows the key cap")
        assert "a unique key held 60 s after success" in page.inner_text("#detail-config")
        config = svc.queue_config(queue, fresh=True)
        assert (config.key_max_running, config.key_rate) == (2, 2.5)

        page.fill("#cancel-descriptors", f"{pending}\n{running}\n")
        page.click("#btn-cancel")
        confirm(page, f"End 2 job(s) of {queue} now?")
        wait_for(lambda: "cancel on" in page.inner_text("#toast"), what="the cancel's result")
        toast = page.inner_text("#toast")
        assert f"cancelled: {pending}" in toast and f"interrupted: {running}" in toast, toast
        assert {i.state for i in svc.lookup([pending, running]).values()} == {JobState.FAILED}
    finally:
        # The shard cards count every queue's failed jobs: leave none for the page's other tests.
        svc.delete_jobs(queue, "failed")
        svc.delete_jobs(queue, "pending")
        svc.delete_jobs(queue, "running")
