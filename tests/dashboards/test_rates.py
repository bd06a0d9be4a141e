"""GET /api/rates: a queue's enqueues and ACKs show in the minute they
happened, as jobs per second; bad parameters get a one-line 400; the
busiest queues are the ones returned; one control-store read serves every
request for ``ttl_s``."""

from __future__ import annotations

import itertools
import uuid
from functools import partial
from typing import Any

import pytest

from dashboards.rates import CHART_EVENTS, RateCharts
from pinlater.engine.counters import current_minute, minute_series
from pinlater.stores.memory.control import MemoryControlStore
from tests.dashboards.http import call
from tests.dashboards.support import WORK, Cluster, clear_of_minute_end, run_known_work
from tests.support.waits import wait_for


def rates(c: Cluster, query: str = "") -> dict[str, Any]:
    status, body = call(f"{c.url}/api/rates{query}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def find(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((q for q in body["queues"] if q["name"] == name), None)


def test_known_work_shows_in_its_minute(cluster: Cluster) -> None:
    queue = f"rates_{uuid.uuid4().hex[:8]}"
    clear_of_minute_end()
    minute = current_minute()
    run_known_work(cluster.svc, queue)
    assert current_minute() == minute, "the workload crossed a minute boundary"
    cluster.dashboard.collector.invalidate()  # the queue is new: the snapshot must list it

    body = wait_for(lambda: (b := rates(cluster, "?minutes=60&limit=100")) and find(b, queue) and b,
                    what="the new queue in /api/rates")
    q = find(body, queue)
    assert q is not None
    assert body["minutes"] == 60 and len(body["minute_starts_ms"]) == 60
    starts = body["minute_starts_ms"]
    assert starts[-1] == minute * 60_000 and all(b - a == 60_000 for a, b in itertools.pairwise(starts))
    assert set(q["rates"]) == set(CHART_EVENTS) and all(len(s) == 60 for s in q["rates"].values())
    assert q["events"] == WORK
    for event, n in WORK.items():
        series = q["rates"][event]
        assert series[:-1] == [0] * 59, event  # nothing before this minute
        # Per second of it so far. The rate has 4 decimals and last_minute_s 3:
        # in a minute's first seconds the product is off by up to n / 2000.
        assert series[-1] * body["last_minute_s"] == pytest.approx(n, abs=0.005 + n / 2000), event
    # A shorter window is the same minutes' tail.
    short = find(rates(cluster, "?minutes=3&limit=100"), queue)
    assert short is not None and short["events"] == WORK and len(short["rates"]["enqueued"]) == 3


def test_only_the_busiest_queues_up_to_the_limit(cluster: Cluster) -> None:
    quiet = f"a_quiet_{uuid.uuid4().hex[:6]}"  # sorts first: it is picked among quiet queues if any is
    cluster.svc.create_queue(quiet, priorities=1)
    cluster.dashboard.collector.invalidate()
    every = wait_for(lambda: (b := rates(cluster, "?limit=100")) and find(b, quiet) and b, what="the quiet queue")
    assert every["queues_total"] <= 100 and not every["truncated"]
    names = [q["name"] for q in every["queues"]]
    assert names == sorted(names)  # charts keep their places between refreshes
    assert find(every, quiet)["events"] == dict.fromkeys(CHART_EVENTS, 0)  # type: ignore[index]

    [busiest] = rates(cluster, "?limit=1")["queues"]
    activity = {q["name"]: sum(q["events"].values()) for q in every["queues"]}
    assert activity[busiest["name"]] == max(activity.values()) > 0
    one = rates(cluster, "?limit=1")
    assert one["truncated"] and one["queues_total"] == every["queues_total"]


@pytest.mark.parametrize(("query", "message"), [
    ("?minutes=0", "minutes must be between 1 and 60, got 0"),
    ("?minutes=61", "minutes must be between 1 and 60, got 61"),
    ("?minutes=an+hour", "minutes must be a whole number, got 'an hour'"),
    ("?minutes=1.5", "minutes must be a whole number"),
    ("?limit=0", "limit must be between 1 and 100, got 0"),
    ("?limit=101", "limit must be between 1 and 100, got 101"),
])
def test_bad_parameters_are_refused_in_one_line(cluster: Cluster, query: str, message: str) -> None:
    status, body = call(f"{cluster.url}/api/rates{query}")
    assert status == 400
    assert body["error"]["code"] == "INVALID_REQUEST"
    assert message in body["error"]["message"] and "\n" not in body["error"]["message"]


class CountingStore(MemoryControlStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read_counts(self, since_minute: int, until_minute: int) -> dict[int, dict[str, dict[str, int]]]:
        self.reads += 1
        return super().read_counts(since_minute, until_minute)


def test_one_read_of_the_control_store_serves_every_window_for_ttl() -> None:
    store = CountingStore()
    store.add_counts(current_minute(), {"q": {"enqueued": 6}, "gone": {"enqueued": 99}})
    charts = RateCharts(partial(minute_series, store), lambda: ["q", "idle"], ttl_s=60)
    hour, five = charts.charts(60, 10), charts.charts(5, 10)
    assert store.reads == 1
    assert [q["name"] for q in hour["queues"]] == ["idle", "q"]  # a queue deleted since is not charted
    assert hour["taken_at_ms"] == five["taken_at_ms"]
    assert five["minute_starts_ms"] == hour["minute_starts_ms"][-5:]
    assert hour["queues"][1]["events"]["enqueued"] == five["queues"][1]["events"]["enqueued"] == 6
    charts.ttl_s = 0
    charts.charts(60, 10)
    assert store.reads == 2
