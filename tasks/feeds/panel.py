"""The dashboard's HBase panel (``GET /api/hbase``, a ``dashboards.panels``
plugin): the health of both clusters and the PinLater queues of the
following-feed tasks, built from the snapshot the rest of the page shows
and the last probes of ``tasks.hbase.health``, so a request reads nothing
more from the shards or the clusters. Its part of the page is in
``static/`` beside this module. Its shape:

    taken_at_ms, partial, settings_error,
    clusters: [{name, address, reachable, latency_ms, error, checked_at_ms,
                thrift2: {address, reachable, latency_ms, error, checked_at_ms},
                trimming: {mode, cap, cells_dropped, rows_trimmed, compactions_trimmed,
                           compactions_passed, error, checked_at_ms},
                write_queue, backlog: QUEUE}],
    fanout: QUEUE and {lag_ms, oldest_run_after_ms},
    trim: QUEUE,           (succeeded: trims done within the queue's retention)
    trim_sweep: QUEUE      (pending or running: a sweep in progress)

A cluster's own address to checked_at_ms are its Thrift1 server's (scans),
``thrift2`` the same for its Thrift2 server (writes, reads, table changes):
``reachable`` is null until the server's first probe ends, ``latency_ms``
is set when it answered, ``error`` (one line) when it did not. Thrift1 up
and Thrift2 down is a cluster that takes no writes (they wait in its write
queue) and answers no feed read or lookup (the other cluster does); only
its scans work.

``trimming`` says how the cluster's feed rows are capped: ``mode``
"compaction" (the feed table is attached to the trimming coprocessor, whose
cap is ``cap``), "sweep" (it is not: fan-out trims and the sweep cap it),
null while unknown. The counts are the coprocessor's on that region server
since it started, from its JMX (null when unreadable; ``error`` says why).

QUEUE is {queue, exists, config_error, pending_now, pending_future,
pending, running, succeeded, failed}: pending_now is due, pending_future
waits for its run_after (retries waiting among them), pending is both. A
queue not created yet shows zeros with ``exists`` false; counts are null
when its stored config cannot be read (``config_error`` says why). Like the
snapshot, ``partial`` means a shard is down and its jobs are not counted.

Fan-out lag is now - run_after of the oldest due pending job of the fan-out
queue (0 when none is due). It is the snapshot's ``oldest_pending`` of that
queue, which the pass finds for every queue anyway: per shard and priority
holding due jobs, one dry-run peek at the job dequeue would take next (the
oldest run_after first) and a lookup of its run_after, and nothing more
here. ``scan`` would cost far more: it returns pending jobs newest first,
so the oldest comes last, after every other pending job has been read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dashboards.panels import View
from dashboards.snapshot import STATES
from tasks.feeds.queues import FANOUT, TRIM, TRIM_SWEEP, WRITE
from tasks.feeds.tables import FOLLOWING_FEED
from tasks.hbase.health import HBaseHealth


def _queue(snap: Mapping[str, Any], name: str) -> dict[str, Any]:
    view = next((q for q in snap["queues"] if q["name"] == name), None)
    counts = dict.fromkeys(STATES, 0) if view is None else view["counts"]
    out: dict[str, Any] = {"queue": name, "exists": view is not None,
                           "config_error": None if view is None else view["config_error"]}
    if counts is None:  # not even its priorities could be read: nothing was counted
        return {**out, **dict.fromkeys(STATES), "pending": None}
    return {**out, **counts, "pending": counts["pending_now"] + counts["pending_future"]}


def _fanout(snap: Mapping[str, Any]) -> dict[str, Any]:
    view = next((q for q in snap["queues"] if q["name"] == FANOUT), None)
    oldest = view["oldest_pending"] if view is not None else None
    return {
        **_queue(snap, FANOUT),
        "lag_ms": oldest["age_ms"] if oldest else 0,
        "oldest_run_after_ms": oldest["run_after_ms"] if oldest else None,
    }


def hbase_view(snap: Mapping[str, Any], health: HBaseHealth) -> dict[str, Any]:
    clusters = [
        {**dataclasses.asdict(c), "write_queue": WRITE[c.name], "backlog": _queue(snap, WRITE[c.name])}
        for c in health.clusters()
    ]
    return {
        "taken_at_ms": snap["taken_at_ms"],
        "partial": snap["partial"],
        "settings_error": health.settings_error,
        "clusters": clusters,
        "fanout": _fanout(snap),
        "trim": _queue(snap, TRIM),
        "trim_sweep": _queue(snap, TRIM_SWEEP),
    }


class HBasePanel:
    """The panel: probes the clusters in the background (``HBaseHealth``),
    answers ``/api/hbase`` from the last probes. ``health`` defaults to
    the clusters of ``PINLATER_HBASE_*``; settings it cannot read leave the
    panel saying why instead of stopping the dashboard."""

    name = "hbase"
    static_dir = Path(__file__).with_name("static")

    def __init__(self, health: HBaseHealth) -> None:
        self.health = health
        self.routes: Mapping[str, View] = {"/api/hbase": lambda snap: hbase_view(snap, self.health)}

    @classmethod
    def from_env(cls, *, interval_s: float) -> HBasePanel:
        """The entry point (``pinlater.dashboard_panels``)."""
        return cls(HBaseHealth.from_env(interval_s=interval_s, trimmed=FOLLOWING_FEED))

    def start(self) -> None:
        self.health.start()

    def close(self) -> None:
        self.health.close()
