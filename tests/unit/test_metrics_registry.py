"""The one metrics registry (``pinlater.observe.metrics``): its Prometheus
text is what prometheus_client's parser reads back, sample for sample, and
OpenTelemetry receives the same families with the same values, read from
the registry itself. The apps' store calls report through the seam."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from pinlater import Job, JobService
from pinlater.observe import seam, tracing
from pinlater.observe.metrics import Family, Registry, prometheus_text
from tests.support import scrape
from tests.support.stores import settings_for


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _families() -> list[Family]:
    calls = Family("demo_calls_total", "counter", "Calls, by path.")
    calls.add(3, path="/a").add(1, path='/b "quoted" \\ and\nnewline')
    level = Family("demo_level", "gauge", "A level.").add(0.25).add(math.inf, "", kind="unlimited")
    wait = Family("demo_wait_seconds", "histogram", "Waits.")
    wait.add(1, "_bucket", le="0.1").add(2, "_bucket", le="+Inf").add(0.35, "_sum").add(2, "_count")
    took = Family("demo_took_seconds", "summary", "Took.")
    took.add(0.002, "", quantile="0.5").add(0.125, "_sum").add(7, "_count")
    return [calls, level, wait, took]


def test_the_text_is_what_the_reference_parser_reads_back_sample_for_sample() -> None:
    text = Registry(_families).text()
    assert text.endswith("\n") and text.startswith("# HELP demo_calls_total Calls, by path.\n# TYPE demo_calls_total")
    assert 'path="/b \\"quoted\\" \\\\ and\\nnewline"' in text  # escaped as the format says
    assert 'demo_level{kind="unlimited"} +Inf' in text
    parsed = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert parsed == {"demo_calls": "counter", "demo_level": "gauge", "demo_wait_seconds": "histogram",
                      "demo_took_seconds": "summary"}
    want = {(f.name + suffix, tuple(sorted(labels))): float(value)
            for f in _families() for suffix, labels, value in f.samples}
    assert _samples(text) == want


def test_a_registry_reads_its_sources_in_order_each_time() -> None:
    reads = []

    def source() -> list[Family]:
        reads.append(1)
        return [Family("demo_reads", "gauge", "Reads.").add(len(reads))]

    registry = Registry(source)
    registry.register(lambda: [Family("demo_last", "gauge", "Last.")])
    assert [f.name for f in registry.collect()] == ["demo_reads", "demo_last"]
    assert "demo_reads 2\n" in registry.text()
    assert prometheus_text([]) == ""
    with pytest.raises(ValueError, match="no metric type 'untyped'"):
        Family("demo", "untyped", "?")


def test_otel_names_and_units_are_those_an_otel_prometheus_exporter_shows() -> None:
    assert Family("a_calls_total", "counter", "").otel_name_and_unit == ("a_calls", "")
    assert Family("a_restarts", "counter", "").otel_name_and_unit == ("a_restarts", "")
    assert Family("a_age_seconds", "gauge", "").otel_name_and_unit == ("a_age", "s")
    assert Family("a_uptime_s", "gauge", "").otel_name_and_unit == ("a_uptime_s", "")


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    made = InMemoryMetricReader()
    tracing.use_metrics(MeterProvider(metric_readers=[made]))
    yield made
    tracing.use_metrics(None)


def _found(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def _points(metric: Any) -> dict[tuple[tuple[str, str], ...], Any]:
    return {tuple(sorted(dict(p.attributes).items())): p for p in metric.data.data_points}


def test_opentelemetry_receives_what_the_text_says(reader: InMemoryMetricReader) -> None:
    registry = Registry(_families)
    tracing.observe_metrics(registry.collect)
    found = _found(reader)
    families = [f for f in scrape.parse(registry.text()).values() if f.kind in ("counter", "gauge")]
    assert {f.name for f in families} == {"demo_calls", "demo_level"}
    for family in families:
        name, unit = family.otel_name_and_unit
        assert found[name].unit == unit
        # OpenTelemetry takes finite values only: the unlimited level is left out.
        want = {tuple(sorted(labels)): v for _, labels, v in family.samples if math.isfinite(v)}
        assert {labels: p.value for labels, p in _points(found[name]).items()} == want, family.name
    assert "demo_wait" not in found and "demo_took" not in found  # histograms: instruments of their own


def test_the_job_services_store_calls_are_the_same_in_the_text_and_in_opentelemetry(
    reader: InMemoryMetricReader, queue_name: str
) -> None:
    with JobService.from_settings(settings_for("memory"), source="registry-test") as svc:
        svc.create_queue(queue_name)
        svc.enqueue(queue_name, [Job(b"a")])
        svc.enqueue(queue_name, [Job(b"b"), Job(b"c")])
        text = svc.operators.store_metrics()
        shard = svc.operators.shard_ids()[0]
    labels = (("op", "enqueue"), ("shard", shard))
    samples = _samples(text)
    assert samples[("pinlater_store_calls_total", labels)] == 2
    assert samples[("pinlater_store_call_seconds_count", labels)] == 2
    assert samples[("pinlater_store_call_seconds_bucket", (("le", "+Inf"), *labels))] == 2
    found = _found(reader)
    assert _points(found["pinlater_store_calls"])[labels].value == 2
    latency = _points(found["pinlater_store_call"])[labels]
    assert found["pinlater_store_call"].unit == "s" and latency.count == 2
    assert latency.sum == pytest.approx(samples[("pinlater_store_call_seconds_sum", labels)])


def test_an_apps_store_call_reports_through_the_seam(reader: InMemoryMetricReader) -> None:
    def count(text: str, name: str, **labels: str) -> float:
        return _samples(text).get((name, tuple(sorted(labels.items()))), 0.0)

    before = prometheus_text(seam.app_store_families())
    assert seam.app_call("hbase", "unit-cluster", "get row", lambda: 7, {}) == 7
    def missing() -> int:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        seam.app_call("hbase", "unit-cluster", "get row", missing, {})
    after = prometheus_text(seam.app_store_families())
    key = {"store": "hbase", "shard": "unit-cluster", "op": "get row"}
    assert count(after, "pinlater_app_store_calls_total", **key) - count(
        before, "pinlater_app_store_calls_total", **key) == 2
    assert count(after, "pinlater_app_store_errors_total", **key, error="KeyError") - count(
        before, "pinlater_app_store_errors_total", **key, error="KeyError") == 1
    assert {f.name: f.type for f in text_string_to_metric_families(after)} == {
        "pinlater_app_store_calls": "counter", "pinlater_app_store_errors": "counter",
        "pinlater_app_store_call_seconds": "histogram"}
    found = _found(reader)  # since this test's provider: its two calls exactly
    attributes = tuple(sorted(key.items()))
    assert _points(found["pinlater_app_store_calls"])[attributes].value == 2
    errors = _points(found["pinlater_app_store_errors"])
    assert errors[tuple(sorted({**key, "error": "KeyError"}.items()))].value == 1
    assert found["pinlater_app_store_call"].unit == "s"
    assert _points(found["pinlater_app_store_call"])[attributes].count == 2


def test_a_thread_per_call_keeps_the_tables_of_live_threads_only_and_loses_no_count() -> None:
    """Servers run a thread per connection: each thread counts into a table
    of its own, and the tables of threads that ended are folded into one,
    so memory and a scrape's work follow the live threads, not every
    connection ever made."""
    metrics = seam.StoreMetrics("test")

    def call(i: int) -> None:
        metrics.record("s1", "op", 0.001, "timeout" if i % 10 == 0 else None)

    for i in range(2000):
        thread = threading.Thread(target=call, args=(i,))
        thread.start()
        thread.join()
    assert len(metrics._tables) <= seam.FOLD_AT
    metrics.record("s1", "op", 0.002, None)  # and the main thread's own
    [(_, s)] = metrics._merged().items()
    assert (s.calls, s.errors, sum(s.buckets)) == (2001, {"timeout": 200}, 2001)
