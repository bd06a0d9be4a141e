"""The JSON API and /metrics agree with the backend after the workload, and
every control is authenticated, validated and audited."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from dashboards.progress import ProgressBoard
from dashboards.server import Dashboard
from pinlater import Ack, Job, JobService, JobState
from pinlater.engine.counters import EVENTS, recent_rates, recent_totals
from pinlater.observe import tracing
from tests.dashboards.http import call, control
from tests.dashboards.support import STATE_QUERIES, TOKEN, Cluster, backend_counts, dashboard_settings
from tests.support import scrape
from tests.support.waits import wait_for


def fresh_overview(c: Cluster) -> dict:  # type: ignore[type-arg]
    c.dashboard.collector.invalidate()
    status, snap = call(c.url + "/api/overview")
    assert status == 200, snap
    return snap  # type: ignore[no-any-return]


def queue_view(snap: dict, name: str) -> dict:  # type: ignore[type-arg]
    [q] = [q for q in snap["queues"] if q["name"] == name]
    return q  # type: ignore[no-any-return]


def test_overview_agrees_with_the_backend(cluster: Cluster) -> None:
    svc, queue, work = cluster.svc, cluster.work.queue, cluster.work
    snap = fresh_overview(cluster)
    q = queue_view(snap, queue)
    assert q["counts"] == backend_counts(svc, queue)
    for p in ("1", "2", "3"):
        assert q["by_priority"][p] == backend_counts(svc, queue, int(p)), p
    by_shard = svc.operators.count_by_shard(queue)
    for shard, counts in q["by_shard"].items():
        assert counts["pending_now"] == by_shard[shard]["pending"]
        for key in ("pending_future", "running", "succeeded", "failed"):
            assert counts[key] == by_shard[shard][key], (shard, key)
    assert {s["id"] for s in snap["shards"]} == {"r1", "r2"}
    assert all(s["healthy"] and s["counted"] for s in snap["shards"]) and not snap["partial"]
    assert snap["control_store"]["ok"]

    # Event counts in the rate window are the control store's, and the
    # workload's own numbers (this queue is new).
    totals = recent_totals(svc.core.control, snap["rate_window_minutes"])[queue]
    assert q["events"] == {e: totals.get(e, 0) for e in EVENTS}
    assert q["events"]["enqueued"] == len(work.enqueued) == 3000
    assert q["events"]["dequeued"] >= work.dequeued  # the pause test may have dequeued one more
    rates = recent_rates(svc.core.control, snap["rate_window_minutes"])[queue]
    assert q["rates"]["enqueued"] == pytest.approx(rates["enqueued"], rel=0.25)  # the window grows

    # The oldest runnable pending job: its run_after is the smallest of all.
    pending = svc.scan(queue, JobState.PENDING, limit=10_000).jobs
    assert len(pending) == q["counts"]["pending_now"]
    oldest = min(j.run_after_ms for j in pending)
    assert q["oldest_pending"]["run_after_ms"] == oldest
    assert q["oldest_pending"]["age_ms"] >= 0
    assert q["max_dequeue_rate"] is None and q["paused"] is False


def test_metrics_agree_with_the_backend(cluster: Cluster) -> None:
    svc, queue = cluster.svc, cluster.work.queue
    cluster.dashboard.collector.invalidate()
    status, text = call(cluster.url + "/metrics")
    assert status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)  # the official parser: the format is valid
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    for p in (1, 2, 3):
        expected = backend_counts(svc, queue, p)
        for state in STATE_QUERIES:
            assert value("pinlater_queue_jobs", queue=queue, state=state, priority=str(p)) == expected[state]
    by_shard = svc.operators.count_by_shard(queue)
    for shard in ("r1", "r2"):
        assert value("pinlater_queue_shard_jobs", queue=queue, state="failed", shard=shard) == by_shard[shard]["failed"]
        assert value("pinlater_shard_up", shard=shard) == 1
    totals = recent_totals(svc.core.control, 5)[queue]
    for event in ("enqueued", "dequeued", "succeeded", "failed"):
        assert value("pinlater_queue_events", queue=queue, event=event, window="5m") == totals[event]
    assert value("pinlater_queue_events_per_second", queue=queue, event="enqueued", window="5m") > 0
    assert math.isinf(value("pinlater_queue_max_dequeue_rate", queue=queue))
    assert value("pinlater_queue_paused", queue=queue) == 0
    assert value("pinlater_queue_oldest_pending_age_seconds", queue=queue) >= 0
    assert value("pinlater_control_store_up") == 1


def test_controls_need_the_token_and_valid_input(cluster: Cluster) -> None:
    base, queue = cluster.url, cluster.work.queue
    assert control(base, queue, "pause", token=None)[0] == 401
    status, body = control(base, queue, "pause", token="wrong")
    assert status == 403 and body["error"]["code"] == "TOKEN_INVALID"
    # The token must come in a header: a form post (no JSON) is refused too.
    status, body = call(f"{base}/api/queues/{queue}/pause", raw=b"a=1", token=TOKEN,
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415
    cases = [
        ("pause", {}, {"operator": ""}, "operator name"),
        ("rate", {"rate": -1}, {}, "rate must be between"),
        ("rate", {"rate": "fast"}, {}, "rate must be a number"),
        ("rate", {}, {}, "rate is required"),
        ("concurrency", {}, {}, "max_running is required"),
        ("concurrency", {"max_running": 0}, {}, "max_running must be between 1 and 1000000"),
        ("concurrency", {"max_running": 2.5}, {}, "max_running must be a whole number"),
        ("concurrency", {"max_running": "9"}, {}, "max_running must be a whole number"),
        ("concurrency", {"max_running": 10**30}, {}, "max_running must be between"),
        ("key-limits", {}, {}, "key_max_running or key_rate is required"),
        ("key-limits", {"key_max_running": 0}, {}, "key_max_running must be between 1 and 1000000"),
        ("key-limits", {"key_rate": 0}, {}, "key_rate must be above 0"),
        ("key-limits", {"key_rate": "fast"}, {}, "key_rate must be a number"),
        ("key-limits", {"key_rate": 1e300}, {}, "key_rate must be between"),
        ("retry-failed", {"limit": 0}, {}, "limit must be between"),
        ("retry-failed", {"limt": 5}, {}, "unknown field"),
        ("retry-failed", {"priority": 9}, {}, "priority must be between 1 and 3"),
        ("retry-failed", {"delay_s": 5, "run_after_ms": 1}, {}, "not both"),
        ("delete-jobs", {"state": "gone"}, {}, "unknown job state"),
        ("delete-jobs", {"state": "failed", "body_regex": "(unclosed"}, {}, "invalid body regex"),
        ("delete-jobs", {}, {}, "state is required"),
        ("cancel", {}, {}, "descriptors must be a list"),
        ("cancel", {"descriptors": "x"}, {}, "descriptors must be a list"),
        ("cancel", {"descriptors": [1]}, {}, "descriptors must be a list"),
        ("cancel", {"descriptors": ["nope"]}, {}, "malformed"),
        ("explode", {}, {}, "unknown control"),
    ]
    for action, body, kw, message in cases:
        status, answer = control(base, queue, action, body, **kw)
        assert status == 400 and message in answer["error"]["message"], (action, body, answer)
    assert control(base, "no_such_queue", "pause")[0] == 404
    assert control(base, "bad-name!", "pause")[0] == 400
    assert call(f"{base}/api/nothing")[0] == 404
    assert cluster.svc.queue_config(queue, fresh=True).paused is False  # nothing above changed anything
    entries = call(f"{base}/api/audit")[1]["entries"]
    assert not [e for e in entries if e["queue"] == queue and e["action"] == "pause"]


def test_rate_control_is_applied_and_audited(cluster: Cluster) -> None:
    base, queue, svc = cluster.url, cluster.work.queue, cluster.svc
    status, body = control(base, queue, "rate", {"rate": 250}, operator="alice")
    assert status == 200 and body["max_dequeue_rate"] == 250 and body["audited"] is True
    assert svc.queue_config(queue, fresh=True).max_dequeue_rate == 250
    assert queue_view(fresh_overview(cluster), queue)["max_dequeue_rate"] == 250
    assert control(base, queue, "rate", {"rate": None})[1]["max_dequeue_rate"] is None
    entries = call(f"{base}/api/audit?limit=5")[1]["entries"]
    first = next(e for e in entries if e["params"].get("rate") == 250)
    assert first["operator"] == "alice" and first["remote"] == "127.0.0.1" and first["ok"] is True
    assert first["queue"] == queue and first["at_ms"] > 0


def test_concurrency_control_is_applied_shown_and_audited(cluster: Cluster) -> None:
    base, queue, svc = cluster.url, cluster.work.queue, cluster.svc
    status, body = control(base, queue, "concurrency", {"max_running": 7}, operator="carol")
    assert status == 200 and body["max_running"] == 7 and body["audited"] is True
    assert svc.queue_config(queue, fresh=True).max_running == 7
    view = queue_view(fresh_overview(cluster), queue)
    assert view["max_running"] == 7 and view["counts"]["running"] == svc.count(queue, "running")
    metrics = call(f"{base}/metrics")[1]
    assert f'pinlater_queue_max_running{{queue="{queue}"}} 7' in metrics
    assert control(base, queue, "concurrency", {"max_running": None})[1]["max_running"] is None
    assert svc.queue_config(queue, fresh=True).max_running is None
    entries = call(f"{base}/api/audit?limit=5")[1]["entries"]
    assert any(e["params"] == {"max_running": 7} and e["operator"] == "carol" for e in entries)


def test_key_limits_control_is_applied_shown_and_audited(cluster: Cluster) -> None:
    base, queue, svc = cluster.url, cluster.work.queue, cluster.svc
    status, body = control(base, queue, "key-limits", {"key_max_running": 3, "key_rate": 2.5}, operator="dave")
    assert status == 200 and (body["key_max_running"], body["key_rate"]) == (3, 2.5) and body["audited"] is True
    config = svc.queue_config(queue, fresh=True)
    assert (config.key_max_running, config.key_rate) == (3, 2.5)
    view = queue_view(fresh_overview(cluster), queue)
    assert (view["key_max_running"], view["key_rate"]) == (3, 2.5)
    # One left out stays as it is; null lifts it.
    body = control(base, queue, "key-limits", {"key_rate": None})[1]
    assert (body["key_max_running"], body["key_rate"]) == (3, None)
    assert control(base, queue, "key-limits", {"key_max_running": None})[1]["key_max_running"] is None
    entries = call(f"{base}/api/audit?limit=5")[1]["entries"]
    assert any(e["params"] == {"key_max_running": 3, "key_rate": 2.5} and e["operator"] == "dave" for e in entries)


def test_cancel_control_ends_jobs_and_is_audited(cluster: Cluster) -> None:
    svc = cluster.svc
    queue = f"dash_cancel_{uuid.uuid4().hex[:8]}"  # its own queue: the workload's counts stay as they are
    svc.create_queue(queue)
    [d] = svc.enqueue(queue, [Job(b"x")])
    try:
        status, body = control(cluster.url, queue, "cancel", {"descriptors": [d]}, operator="erin")
        assert status == 200 and body["cancelled"] == [d] and body["audited"] is True, body
        assert svc.lookup([d])[d].state is JobState.FAILED
        status, body = control(cluster.url, queue, "cancel", {"descriptors": [d]}, operator="erin")
        assert body["finished"] == [d]
        entries = call(f"{cluster.url}/api/audit?limit=5")[1]["entries"]
        assert any(e["action"] == "cancel" and e["params"] == {"descriptors": [d]} and e["operator"] == "erin"
                   for e in entries)
    finally:
        # The shard cards count every queue's failed jobs: leave none for the page's tests.
        svc.delete_jobs(queue, "failed")


def test_dry_runs_count_without_changing_anything(cluster: Cluster) -> None:
    base, queue, svc = cluster.url, cluster.work.queue, cluster.svc
    failed = svc.count(queue, "failed")
    status, body = control(base, queue, "retry-failed", {"dry_run": True, "limit": 10_000})
    assert status == 200 and body == {"dry_run": True, "would_affect": failed, "matching": failed,
                                      "partial": False, "shards_skipped": []}
    status, body = control(base, queue, "delete-jobs", {"state": "pending", "body_regex": "^later-", "dry_run": True})
    # later- jobs are scheduled; a delete by regex takes scheduled pending jobs too, so the dry run counts them.
    later = svc.count(queue, "pending", future=True, body_regex="^later-")
    assert later > 0 and body["matching"] == later
    status, body = control(base, queue, "delete-jobs", {"state": "failed", "body_regex": "^once-", "dry_run": True,
                                                        "limit": 5})
    assert body["would_affect"] == min(5, failed)
    assert svc.count(queue, "failed") == failed


def test_delete_dry_run_with_a_hostile_regex_answers_promptly(cluster: Cluster) -> None:
    svc = cluster.svc
    queue = f"dash_regex_{uuid.uuid4().hex[:8]}"  # its own queue: the workload's counts stay as they are
    svc.create_queue(queue)
    for _ in range(8):  # one call each, so both shards hold some
        svc.enqueue(queue, [Job(b"a" * 25 + b"!")])
    dry_run = {"state": "pending", "body_regex": "(a+)+$", "dry_run": True}
    started = time.monotonic()
    status, body = control(cluster.url, queue, "delete-jobs", dry_run)
    elapsed = time.monotonic() - started
    assert status == 200 and body == {"dry_run": True, "would_affect": 0, "matching": 0,
                                      "partial": False, "shards_skipped": []}, body
    assert elapsed < 1.0, f"the dry run took {elapsed:.1f} s"

    status, body = control(cluster.url, queue, "delete-jobs", {**dry_run, "body_regex": r"(a)\1"})
    assert status == 400 and body["error"]["code"] == "INVALID_REQUEST"
    assert r"'(a)\\1' (RE2 syntax): invalid escape sequence" in body["error"]["message"]

    # Past the bodies budget, a clear input error that says how to narrow it.
    settings = dashboard_settings(regex_max_bodies=3)
    small = JobService.from_settings(settings)
    dash = Dashboard(small, settings, port=0).start()
    try:
        status, body = control(dash.url, queue, "delete-jobs", {**dry_run, "body_regex": "^a"})
        assert status == 400 and body["error"]["code"] == "INVALID_REQUEST", body
        message = body["error"]["message"]
        assert "examined 3 bodies" in message and "PINLATER_REGEX_MAX_BODIES" in message
        assert "give a priority" in message
    finally:
        dash.close()
        small.close()
    assert svc.count(queue, "pending") == 8


def test_jobs_listing_and_lookup(cluster: Cluster) -> None:
    base, queue, svc = cluster.url, cluster.work.queue, cluster.svc
    status, page = call(f"{base}/api/jobs?queue={queue}&state=running&limit=7")
    assert status == 200 and len(page["jobs"]) == 7 and page["continuation"] != "-1"
    assert page["partial"] is False and page["shards_skipped"] == []
    job = page["jobs"][0]
    assert job["state"] == "running" and job["claimed_by"] == "dashboard-test" and "body" not in job
    assert job["key"] == ""
    status, more = call(f"{base}/api/jobs?queue={queue}&state=running&limit=7&continuation={page['continuation']}")
    assert not {j["descriptor"] for j in more["jobs"]} & {j["descriptor"] for j in page["jobs"]}
    assert call(f"{base}/api/jobs?queue={queue}&state=nope")[0] == 400
    assert call(f"{base}/api/jobs?queue={queue}&state=failed&limit=abc")[0] == 400

    status, info = call(f"{base}/api/job?descriptor={job['descriptor']}")
    assert status == 200 and "body" not in info and info["attempts_allowed"] >= 1
    # A queue of its own, so that the workload queue's counts stay the workload's.
    other = svc.create_queue(f"{queue}_big").name
    [big] = svc.enqueue(other, [Job(b"x" * 10_000)])
    status, info = call(f"{base}/api/job?descriptor={big}&body=1")
    assert info["body"] == "x" * 4096 and info["body_bytes"] == 10_000 and info["body_truncated"] is True
    assert call(f"{base}/api/job?descriptor={queue}:sr1:p1:999999999")[0] == 404
    assert call(f"{base}/api/job?descriptor=garbage")[0] == 400


def test_progress_records_published_by_any_process(cluster: Cluster) -> None:
    board = ProgressBoard.open(cluster.svc.settings.resolved_control_url)
    op = f"backfill-{uuid.uuid4().hex[:6]}"
    try:
        board.publish(op, "Typeahead backfill", done=250, total=1000, detail="users 0-250")
        ops = {o["id"]: o for o in call(cluster.url + "/api/progress")[1]["operations"]}
        assert ops[op]["fraction"] == 0.25 and ops[op]["status"] == "running" and not ops[op]["stale"]
        board.publish(op, "Typeahead backfill", done=1000, total=1000, status="done")
        ops = {o["id"]: o for o in call(cluster.url + "/api/progress")[1]["operations"]}
        assert ops[op]["status"] == "done" and ops[op]["fraction"] == 1.0
        with pytest.raises(Exception, match="progress id"):
            board.publish("bad id!", "x", done=1)
    finally:
        board.remove(op)
        board.close()


def test_pinlater_dashboard_command(cluster: Cluster) -> None:
    settings = cluster.svc.settings
    env = {
        **os.environ,
        "PINLATER_SHARDS": ",".join(f"{s.id}={s.url}" for s in settings.shards),
        "PINLATER_CONTROL_URL": settings.resolved_control_url,
        "PINLATER_DASHBOARD_TOKEN": TOKEN,
    }
    # Leaving the with block closes the pipes and waits for the process.
    with subprocess.Popen([sys.executable, "-m", "pinlater.cli", "dashboard", "--port", "0"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            assert "controls enabled" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
            url = line.split(" on ", 1)[1].split("/ ", 1)[0]
            assert url.startswith("http://127.0.0.1:")
            assert call(url + "/healthz")[1] == "ok\n"
            snap = wait_for(lambda: call(url + "/api/overview")[1], what="overview")
            assert cluster.work.queue in {q["name"] for q in snap["queues"]}
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_metrics_reach_opentelemetry_too_with_their_names_and_values(cluster: Cluster) -> None:
    """Every counter and gauge of /metrics, read from the same snapshot."""
    reader = InMemoryMetricReader()
    tracing.use_metrics(MeterProvider(metric_readers=[reader]))
    try:
        dashboard = Dashboard.from_settings(dashboard_settings(), port=0, refresh_s=60).start()
        try:
            text = dashboard.api.metrics_text()
            data = reader.get_metrics_data()
        finally:
            dashboard.close()
    finally:
        tracing.use_metrics(None)
    assert data is not None
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    # Store calls (the apps' panels make some) are instruments of their own, counted since the provider.
    families = [f for f in scrape.parse(text).values() if f.kind in ("counter", "gauge") and f.samples
                and not f.name.startswith(("pinlater_store_", "pinlater_app_store_"))]
    assert len(families) >= 10 and any(f.name == "pinlater_queue_jobs" for f in families)
    for family in families:
        name, unit = family.otel_name_and_unit
        # OpenTelemetry takes finite values only: an unlimited rate (+Inf) is left out.
        want = {tuple(sorted(labels)): value for _, labels, value in family.samples if math.isfinite(value)}
        if not want:
            assert name not in found, family.name
            continue
        assert name in found and found[name].unit == unit, family.name
        points: list[Any] = list(found[name].data.data_points)
        got = {tuple(sorted(dict(p.attributes).items())): p.value for p in points}
        assert got == want, family.name


def test_batches_show_among_the_long_operations(cluster: Cluster) -> None:
    svc = cluster.svc
    queue = f"dash_batch_{uuid.uuid4().hex[:8]}"  # its own queue: the workload's counts stay as they are
    svc.create_queue(queue)
    batch = svc.create_batch(queue, Job(b"callback"), description="dashboard batch")
    try:
        stored = svc.enqueue(queue, [Job(b"a"), Job(b"b")], batch=batch)
        svc.seal_batch(batch)
        [job] = svc.dequeue(queue, 1)
        svc.ack(queue, succeeded=[Ack(job.descriptor, claim=job.claim)])
        assert svc.batch_status(batch).succeeded == 1  # told now by this process, not in its next 20 ms
        ops = {op["id"]: op for op in call(f"{cluster.url}/api/progress")[1]["operations"]}
        op = ops[batch]
        assert (op["title"], op["done"], op["total"], op["status"], op["state"]) == (
            "Batch dashboard batch", 1, 2, "running", "sealed")
        assert op["fraction"] == 0.5 and "1 succeeded, 0 failed, 1 to go; waiting for its jobs" in op["detail"]
        [other] = [d for d in stored if d != job.descriptor]
        [job] = svc.dequeue(queue, 1)
        assert job.descriptor == other
        svc.ack(queue, succeeded=[Ack(other, claim=job.claim)])
        assert svc.batch_status(batch).state == "released"
        op = {op["id"]: op for op in call(f"{cluster.url}/api/progress")[1]["operations"]}[batch]
        assert (op["done"], op["status"], op["state"]) == (2, "done", "released")
    finally:
        # The shard cards count every queue's jobs: leave none for the page's tests.
        for state in ("pending", "running", "succeeded", "failed"):
            svc.delete_jobs(queue, state)
