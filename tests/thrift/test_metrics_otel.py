"""A server's ``/metrics`` through OpenTelemetry too: every counter and
gauge family as an instrument with the name and unit an OpenTelemetry
Prometheus exporter shows as on ``/metrics`` (as prometheus_client parses it), with the
same values; the store calls and call times as instruments of their own."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pinlater.errors import QueueNotFound
from pinlater.models import Job
from pinlater.observe import tracing
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.support import scrape
from tests.thrift.conftest import make_service


def _points(metric: Any) -> dict[tuple[tuple[str, str], ...], Any]:
    return {tuple(sorted(dict(p.attributes).items())): p for p in metric.data.data_points}


def test_the_servers_metrics_reach_opentelemetry_with_their_names_units_and_values(
    start_server: Callable[..., ThriftServer], queue_name: str
) -> None:
    reader = InMemoryMetricReader()
    tracing.use_metrics(MeterProvider(metric_readers=[reader]))
    service = make_service("memory")
    try:
        server = start_server(service)
        with ThriftClient([f"127.0.0.1:{server.port}"], source="otel-metrics") as client:
            client.create_queue(queue_name)
            client.enqueue(queue_name, [Job(b"a")])
            client.enqueue(queue_name, [Job(b"b")])
            assert client.count(queue_name, "pending") == 2
            with pytest.raises(QueueNotFound):  # an error, by method and code
                client.count(f"{queue_name}_missing", "pending")
            assert server.metrics is not None
            with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics.port}/metrics", timeout=5) as response:
                text = response.read().decode()
            data = reader.get_metrics_data()
    finally:
        tracing.use_metrics(None)
        service.close()
    assert data is not None
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    families = [f for f in scrape.parse(text).values()
                if f.kind in ("counter", "gauge") and not f.name.startswith(("pinlater_store_", "pinlater_app_store_"))]
    assert {f.name for f in families} >= {"pinlater_server_requests", "pinlater_server_connections_open",
                                           "pinlater_server_bad_frames", "pinlater_server_processes"}
    assert all(f.samples for f in families if f.name == "pinlater_server_errors")
    for family in (f for f in families if f.samples):  # a family without samples has no points
        name, unit = family.otel_name_and_unit
        assert name in found, f"{family.name} is not an OpenTelemetry metric ({name})"
        assert found[name].unit == unit
        got = {labels: p.value for labels, p in _points(found[name]).items()}
        if family.name == "pinlater_server_uptime_s":  # read again, a moment later
            assert got[()] >= family.samples[0][2]
            continue
        if family.name == "pinlater_http_connections_open":
            # The scrape's own connection was open for /metrics; it may be
            # closed by the time OpenTelemetry reads.
            assert [value for _, _, value in family.samples] == [1]  # the scrape itself
            assert set(got) == {tuple(sorted(labels)) for _, labels, _ in family.samples}
            assert all(v in (0, 1) for v in got.values()), got
            continue
        assert got == {tuple(sorted(labels)): value for _, labels, value in family.samples}, family.name

    # Its own instruments: the call times by method, and the store calls.
    calls = _points(found["pinlater_server_request"])
    assert found["pinlater_server_request"].unit == "s" and calls[(("method", "enqueueJobs"),)].count == 2
    store = _points(found["pinlater_store_calls"])
    assert sum(p.value for labels, p in store.items() if ("op", "enqueue") in labels) == 2
