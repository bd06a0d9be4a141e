"""Per-minute event series (the dashboard's rate charts) on every control
store: each count lands in its own minute, oldest first, and one read
returns the whole window."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Job, JobService
from pinlater.engine.counters import EVENTS, current_minute, minute_series, recent_totals
from pinlater.stores.control import RETENTION_MINUTES


def test_counts_land_in_their_minute_oldest_first(cluster: JobService, queue_name: str) -> None:
    control, quiet, other = cluster.core.control, queue_name + "_quiet", queue_name + "_other"
    now = time.time()
    m = current_minute(now)
    control.add_counts(m - 60, {queue_name: {"enqueued": 1000}})  # just outside a 60-minute window
    control.add_counts(m - 59, {queue_name: {"enqueued": 7, "failed": 1}})  # the oldest minute in it
    control.add_counts(m - 1, {queue_name: {"dequeued": 4, "succeeded": 3}, other: {"enqueued": 9}})
    control.add_counts(m, {queue_name: {"enqueued": 2}})
    control.add_counts(m, {queue_name: {"enqueued": 3}})  # adds up (another process, the same minute)
    control.add_counts(m + 1, {queue_name: {"enqueued": 500}})  # a clock ahead: not "now" yet

    series = minute_series(control, [queue_name, quiet], minutes=60, now=now)

    assert set(series) == {queue_name, quiet}  # only the queues asked for, each present
    mine = series[queue_name]
    assert set(mine) == set(EVENTS) and all(len(s) == 60 for s in mine.values())
    assert (mine["enqueued"][0], mine["failed"][0]) == (7, 1)
    assert (mine["dequeued"][58], mine["succeeded"][58]) == (4, 3)
    assert mine["enqueued"][59] == 5
    assert sum(mine["enqueued"]) == 12 and sum(mine["dequeued"]) == 4
    assert series[quiet] == {e: [0] * 60 for e in EVENTS}
    # A shorter window is the tail of the long one.
    short = minute_series(control, [queue_name], minutes=2, now=now)[queue_name]
    assert short["enqueued"] == [0, 5] and short["dequeued"] == [4, 0]
    # Without a list: every queue with an event in the window (other sessions' too).
    everyone = minute_series(control, minutes=60, now=now)
    assert everyone[other]["enqueued"][58] == 9 and quiet not in everyone


def test_series_add_up_to_the_events_of_a_real_workload(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=1)] * 6)
    jobs = cluster.dequeue(queue_name, 5)
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor) for j in jobs[:3]],
                failed=[Ack(j.descriptor) for j in jobs[3:]])
    cluster.operators.flush_counters()
    series = minute_series(cluster.core.control, [queue_name], minutes=5)[queue_name]
    totals = recent_totals(cluster.core.control, minutes=4)[queue_name]
    assert {e: sum(s) for e, s in series.items() if sum(s)} == totals
    assert totals == {"enqueued": 6, "dequeued": 5, "succeeded": 3, "failed": 2}


@pytest.mark.parametrize("minutes", [0, -1, RETENTION_MINUTES + 1])
def test_a_window_the_store_does_not_keep_is_refused(minutes: int) -> None:
    from pinlater.stores.memory.control import MemoryControlStore

    with pytest.raises(ValueError, match=f"minutes must be between 1 and {RETENTION_MINUTES}"):
        minute_series(MemoryControlStore(), minutes=minutes)
