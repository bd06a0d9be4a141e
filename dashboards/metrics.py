"""The families of ``GET /metrics`` (``pinlater.observe.metrics``), from the same snapshot the page
shows (so a scrape never costs the shards more than a page refresh).

Queue depths are gauges per queue, state, priority and shard, so a shard
that is down drops out of the sums and ``pinlater_shard_up`` says why.
Event rates come from the per-minute counters in the control store, over
the dashboard's rate window; they are gauges (events per second and events
in the window), not counters, because the control store keeps windows, not
totals since the beginning of time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dashboards.snapshot import STATES
from pinlater.observe.metrics import Family


def _family(families: list[Family], name: str, kind: str, help_text: str) -> Family:
    """A family appended to ``families``: its samples stay together,
    however they are interleaved while built."""
    family = Family(name, kind, help_text)
    families.append(family)
    return family


def families(snap: Mapping[str, Any], collector_stats: Mapping[str, float]) -> list[Family]:
    """The snapshot's metric families (``pinlater.observe.metrics``)."""
    families: list[Family] = []
    window = f"{snap['rate_window_minutes']}m"

    jobs = _family(families, "pinlater_queue_jobs", "gauge",
                   "Jobs by queue, state, priority and shard (pending_now: runnable; pending_future: scheduled).")
    for q in snap["queues"]:
        for p, by_state in q["by_priority"].items():
            for state in STATES:
                # By priority over all counted shards; per-shard split below.
                jobs.add(by_state[state], queue=q["name"], state=state, priority=p)
    shard_jobs = _family(families, "pinlater_queue_shard_jobs", "gauge", "Jobs by queue, state and shard.")
    for q in snap["queues"]:
        for shard, by_state in q["by_shard"].items():
            for state in STATES:
                shard_jobs.add(by_state[state], queue=q["name"], state=state, shard=shard)

    oldest = _family(families, "pinlater_queue_oldest_pending_age_seconds", "gauge",
                     "How long the oldest runnable pending job has waited since its run_after (0: none waiting).")
    rate_limit = _family(families, "pinlater_queue_max_dequeue_rate", "gauge",
                         "Configured dequeue rate limit in jobs/s (+Inf: unlimited).")
    cap = _family(families, "pinlater_queue_max_running", "gauge",
                  "Configured concurrency cap: jobs RUNNING at once at most (+Inf: no cap).")
    paused = _family(families, "pinlater_queue_paused", "gauge", "1 while the queue is paused.")
    config_ok = _family(families, "pinlater_queue_config_ok", "gauge",
                        "0 if the queue's stored config cannot be read or holds an odd value (see the dashboard).")
    for q in snap["queues"]:
        age = (q["oldest_pending"] or {}).get("age_ms", 0) / 1000
        oldest.add(round(age, 3), queue=q["name"])
        config_ok.add(int(q.get("config_error") is None), queue=q["name"])
        if q["paused"] is None:
            continue  # its config cannot be read: neither value is known
        limit = q["max_dequeue_rate"]
        rate_limit.add(math.inf if limit is None else float(limit), queue=q["name"])
        cap.add(math.inf if q["max_running"] is None else q["max_running"], queue=q["name"])
        paused.add(int(q["paused"]), queue=q["name"])

    rates = _family(families, "pinlater_queue_events_per_second", "gauge",
                    "Events per second over the rate window: enqueued, dequeued, succeeded, failed (failure ACKs), "
                    "claims_expired (claim timeouts), retried_by_operator, cancelled (jobs a cancel "
                    "ended), duplicates (enqueues answered with the job holding their unique key).")
    events = _family(families, "pinlater_queue_events", "gauge", "Events counted in the rate window.")
    for q in snap["queues"]:
        for event, value in q["rates"].items():
            rates.add(value, queue=q["name"], event=event, window=window)
        for event, n in q["events"].items():
            events.add(n, queue=q["name"], event=event, window=window)

    up = _family(families, "pinlater_shard_up", "gauge", "1 if the shard is in rotation and was read for this scrape.")
    errors = _family(families, "pinlater_shard_consecutive_errors", "gauge",
                     "Consecutive failed calls to the shard, as its health monitor counts them.")
    shard_total = _family(families, "pinlater_shard_jobs", "gauge", "Jobs on the shard by state, all queues.")
    for s in snap["shards"]:
        up.add(int(s["healthy"] and s["counted"]), shard=s["id"])
        errors.add(int(s["consecutive_errors"]), shard=s["id"])
        for state, n in (s["counts"] or {}).items():
            shard_total.add(n, shard=s["id"], state=state)

    control = _family(families, "pinlater_control_store_up", "gauge",
                      "1 if the control store (queue configs, counters) answered this scrape.")
    control.add(int(snap["control_store"]["ok"]))
    took = _family(families, "pinlater_dashboard_snapshot_seconds", "gauge", "Time the last read of every shard took.")
    took.add(round(snap["took_ms"] / 1000, 4))
    for key, value in sorted(collector_stats.items()):
        name = f"pinlater_dashboard_{key}_total"
        _family(families, name, "counter", f"Dashboard reads of every shard: {key.replace('_', ' ')}.").add(value)
    return families
