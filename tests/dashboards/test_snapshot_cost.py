"""What overview requests cost the stores: whatever their number, one pass
over the shards per ``ttl_s``, each a fixed number of calls per shard and
queue priority (the queues the shards hold read by name, one call a
shard), and the priorities of unregistered queues read only from a shard
that holds one."""

from __future__ import annotations

import threading

from dashboards.snapshot import Collector
from pinlater import Job, JobService
from pinlater.settings import Settings, parse_shards


def calls_by_op(service: JobService) -> dict[str, int]:
    totals: dict[str, int] = {}
    for ops in service.operators.store_metrics_snapshot().values():
        for op, series in ops.items():
            totals[op] = totals.get(op, 0) + int(series["calls"])
    return totals


def test_many_overview_requests_cost_the_shards_one_pass() -> None:
    settings = Settings(shards=parse_shards("m1=memory://,m2=memory://"), control_url="memory://snapshot-cost",
                        health_probe_interval_s=3600)
    with JobService.from_settings(settings, source="cost") as service:
        service.create_queue("cost_q", priorities=2)
        service.enqueue("cost_q", [Job(b"x")] * 4)
        collector = Collector(service.operators, ttl_s=60)
        try:
            before = calls_by_op(service)
            threads = [threading.Thread(target=lambda: [collector.snapshot() for _ in range(20)]) for _ in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            after = calls_by_op(service)
            assert collector.passes == 1
            spent = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
            # One pass: per shard its clock and its queues' names; per shard,
            # priority and state a count (and the oldest pending job where
            # there are any); no stored_queues, nothing being unregistered.
            assert spent["queue_names"] == 2 and spent["now_ms"] == 2 and "stored_queues" not in spent, spent
            assert spent["count"] == 2 * 2 * 5, spent

            service.core.control.delete_queue("cost_q")  # its config lost: unregistered on both shards
            collector.invalidate()
            before = calls_by_op(service)
            snap = collector.snapshot()
            spent = {op: n - before.get(op, 0) for op, n in calls_by_op(service).items() if n != before.get(op, 0)}
            assert [q["name"] for q in snap["unregistered_queues"]] == ["cost_q"]
            assert spent["stored_queues"] == len(snap["unregistered_queues"][0]["shards"]) <= 2, spent
        finally:
            collector.close()
