"""Whatever the control store holds, the dashboard answers valid JSON and
lists every queue: a rate stored as NaN, Infinity, 1e309 or a negative
number (written by an older version, or by hand, bypassing validation) and
even a config that cannot be read at all. The controls refuse such rates
before doing anything."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from dashboards.server import Dashboard
from pinlater import JobService
from pinlater.stores.redis.keys import CONTROL_QUEUES
from tests.dashboards.http import call, control
from tests.dashboards.support import TOKEN, UNREADABLE, Cluster, plant_odd_queues, restore
from tests.support.kinds.mysql import DATABASES as MYSQL_DATABASES
from tests.support.stores import settings_for


def strict_json(text: str) -> Any:
    """RFC 8259 JSON only: NaN, Infinity and -Infinity are not JSON, and a
    browser's JSON.parse refuses them."""
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def get_text(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def check_every_view(base: str, planted: dict[str, str], also: str | None = None) -> None:
    status, text = get_text(base + "/api/overview")
    assert status == 200, text
    snap = strict_json(text)
    queues = {q["name"]: q for q in snap["queues"]}
    assert set(planted) <= set(queues), f"queues missing from the overview: {set(planted) - set(queues)}"
    if also is not None:
        assert also in queues and queues[also]["config_error"] is None
    for name, stored in planted.items():
        q = queues[name]
        rate = q["max_dequeue_rate"]
        assert rate is None or (isinstance(rate, int | float) and 0 <= rate <= 1e9), (name, rate)
        if stored == UNREADABLE:
            assert q["config_error"], q  # shown as a queue whose config cannot be read
        status, text = get_text(f"{base}/api/queues/{name}")
        assert status == 200, (name, text)
        assert strict_json(text)["name"] == name

    status, text = get_text(base + "/metrics")
    assert status == 200, text
    samples = {(s.name, s.labels.get("queue")): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    for name, stored in planted.items():
        assert ("pinlater_queue_config_ok", name) in samples, name
        if stored == UNREADABLE:
            assert samples[("pinlater_queue_config_ok", name)] == 0
        value = samples.get(("pinlater_queue_max_dequeue_rate", name))  # absent when the config is unreadable
        assert value is None or (value >= 0 and not math.isnan(value)), (name, value)


@pytest.fixture
def redis_odd(cluster: Cluster) -> Iterator[dict[str, str]]:
    r = redis.Redis.from_url(cluster.svc.settings.resolved_control_url)
    planted = plant_odd_queues(cluster.svc, lambda name, text: r.hset(CONTROL_QUEUES, name, text))
    cluster.dashboard.collector.invalidate()
    yield planted
    restore(cluster.svc, planted)
    r.close()


def test_redis_control_store_with_odd_configs(cluster: Cluster, redis_odd: dict[str, str]) -> None:
    check_every_view(cluster.url, redis_odd, also=cluster.work.queue)


def test_mysql_control_store_with_odd_configs(servers: None) -> None:
    settings = settings_for("mysql")
    svc = JobService.from_settings(settings, source="dashboard-odd-test")
    svc.queue_names()  # the control store creates its database and tables
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater",
                           database=MYSQL_DATABASES["ctl"], autocommit=True)

    def write_raw(name: str, text: str) -> None:
        with conn.cursor() as cur:
            cur.execute("UPDATE pinlater_queue_config SET config = %s WHERE name = %s", (text, name))
            assert cur.rowcount == 1

    planted = plant_odd_queues(svc, write_raw)
    dash = Dashboard(svc, settings, port=0).start()
    try:
        check_every_view(dash.url, planted)
    finally:
        dash.close()
        restore(svc, planted)
        conn.close()
        svc.close()


def test_progress_records_with_non_finite_numbers(cluster: Cluster) -> None:
    r = redis.Redis.from_url(cluster.svc.settings.resolved_control_url)
    op = f"odd-{uuid.uuid4().hex[:6]}"
    record = {"id": op, "title": "odd", "done": math.nan, "total": math.inf, "status": "running", "detail": "",
              "started_at_ms": 1, "updated_at_ms": 2**40}
    r.hset("pld:map:progress", op, json.dumps(record))  # json.dumps writes NaN and Infinity
    try:
        status, text = get_text(cluster.url + "/api/progress")
        assert status == 200, text
        assert op in {o["id"] for o in strict_json(text)["operations"]}
    finally:
        r.hdel("pld:map:progress", op)
        r.close()


@pytest.mark.parametrize("raw", [
    b'{"rate": NaN}', b'{"rate": Infinity}', b'{"rate": -Infinity}', b'{"rate": 1e309}', b'{"rate": -1}',
    b'{"rate": 1e10}', b'{"rate": "inf"}', b'{"rate": "nan"}', b'{"rate": "1e309"}', b'{"rate": true}',
    b'{"rate": 1' + b"0" * 400 + b"}", b'{"rate": 5e-324}', b'{"rate": 1e-300}', b'{"rate": 5, "rate": null}',
])
def test_rate_control_refuses_non_finite_negative_and_absurd_rates(cluster: Cluster, raw: bytes) -> None:
    queue, svc = cluster.work.queue, cluster.svc
    before = svc.queue_config(queue, fresh=True)
    audit_before = len(call(cluster.url + "/api/audit?limit=1000")[1]["entries"])
    status, body = call(f"{cluster.url}/api/queues/{queue}/rate", raw=raw, token=TOKEN,
                        headers={"Content-Type": "application/json"})
    assert status == 400, (raw, body)
    message = body["error"]["message"]
    assert "rate" in message or "JSON" in message, message
    assert svc.queue_config(queue, fresh=True) == before
    assert len(call(cluster.url + "/api/audit?limit=1000")[1]["entries"]) == audit_before  # nothing was run


def test_rate_control_accepts_the_largest_rate(cluster: Cluster) -> None:
    queue, svc = cluster.work.queue, cluster.svc
    status, body = control(cluster.url, queue, "rate", {"rate": 1e9})
    assert status == 200 and body["max_dequeue_rate"] == 1e9, body
    status, body = control(cluster.url, queue, "rate", {"rate": None})
    assert status == 200 and body["max_dequeue_rate"] is None
    assert svc.queue_config(queue, fresh=True).max_dequeue_rate is None


@pytest.mark.parametrize("limit", ["\uff13", "1_0", "\u0663", "+5", "99999999999999999999"])
def test_query_numbers_are_ascii_decimals(cluster: Cluster, limit: str) -> None:
    status, body = call(cluster.url + "/api/audit?limit=" + urllib.parse.quote(limit))
    assert status == 400 and "limit must be a whole number" in body["error"]["message"], body
