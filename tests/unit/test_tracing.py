"""Tracing (pinlater.observe.tracing): off, nothing of OpenTelemetry is imported;
on, the service's calls and their store calls are spans, errors marked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pinlater import Ack, Job, JobService
from pinlater.errors import ShardConnectionFailed
from pinlater.observe import tracing
from tests.servers import REPO
from tests.support.spans import spans_in_memory
from tests.support.stores import settings_for

# Every layer a job passes through in a process that only uses PinLater:
# the service, its shards, the Thrift client and server, the worker's task
# base and transport, the HBase and MySQL pools of the tasks. An import of
# OpenTelemetry is refused and recorded with the file that asked for it
# (some libraries, redis-py among them, try it for their own tracing and go
# on without it).
HOT_PATH = """
import importlib.abc, os, sys, traceback
asked = []
class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "opentelemetry":
            return None
        frames = [f.filename for f in traceback.extract_stack() if "importlib" not in f.filename]
        asked.append(frames[-2] if len(frames) > 1 else "?")
        raise ModuleNotFoundError(name)
if os.environ.get("BLOCK_OTEL"):
    sys.meta_path.insert(0, NoOtel())
from pinlater import Ack, Job, JobService
from pinlater.observe import tracing
from pinlater.settings import Settings, parse_shards
import pinlater.thrift.server, pinlater.thrift.client, workers.app, workers.task, workers.transport
import tasks.hbase, tasks.appdata.db
svc = JobService.from_settings(Settings(shards=parse_shards("m1=memory://"), control_url="memory://"))
svc.create_queue("hot")
svc.enqueue("hot", [Job(b"x")])
(job,) = svc.dequeue("hot", 1)
svc.ack("hot", succeeded=[Ack(job.descriptor)])
svc.close()
repo = os.getcwd()
ours = sorted({f for f in asked if f.startswith(repo) and "/.venv/" not in f and "site-packages" not in f})
print(tracing.ON, ours)
"""


@pytest.mark.parametrize("exporter", [None, "none"])
def test_off_no_opentelemetry_module_is_imported(exporter: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["BLOCK_OTEL"] = "1"
    if exporter is not None:
        env["OTEL_TRACES_EXPORTER"] = exporter
    out = subprocess.run([sys.executable, "-c", HOT_PATH], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split("\n")[-2] == "False []"


def test_an_unknown_exporter_is_refused_in_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, OTEL_TRACES_EXPORTER="zipkinish")
    out = subprocess.run([sys.executable, "-c", "from pinlater.observe import tracing; tracing.configure()"], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "OTEL_TRACES_EXPORTER: unknown exporter 'zipkinish' (console, otlp, pinlater_file or none)" in out.stderr


def test_the_file_exporter_writes_one_json_span_per_line_named_by_the_service(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    env = dict(os.environ, OTEL_TRACES_EXPORTER="pinlater_file", PINLATER_TRACES_FILE=str(traces),
               OTEL_SERVICE_NAME="file-test")
    script = HOT_PATH + "\ntracing.flush()\n"
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.startswith("True")
    spans = [json.loads(line) for line in traces.read_text().splitlines()]
    names = {s["name"] for s in spans}
    assert {"pinlater enqueue", "pinlater dequeue", "pinlater ack", "store enqueue", "store dequeue"} <= names
    assert {s["service"] for s in spans} == {"file-test"}
    by_id = {s["span_id"]: s for s in spans}
    store_enqueue = next(s for s in spans if s["name"] == "store enqueue")
    assert by_id[store_enqueue["parent_id"]]["name"] == "pinlater enqueue"
    assert store_enqueue["attributes"]["pinlater.queue"] == "hot"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with spans_in_memory() as exporter:
        yield exporter


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_a_call_and_its_store_calls_are_one_trace(spans: InMemorySpanExporter, queue_name: str) -> None:
    with JobService.from_settings(settings_for("memory"), source="trace-test") as svc:
        svc.create_queue(queue_name)
        svc.enqueue(queue_name, [Job(b"a")])
        (job,) = svc.dequeue(queue_name, 1)
        svc.ack(queue_name, succeeded=[Ack(job.descriptor)])
    finished = list(spans.get_finished_spans())
    (enqueue,) = _named(finished, "pinlater enqueue")
    (store,) = _named(finished, "store enqueue")
    assert store.parent is not None and store.parent.span_id == enqueue.context.span_id
    assert store.context.trace_id == enqueue.context.trace_id
    assert enqueue.attributes is not None and enqueue.attributes["pinlater.queue"] == queue_name
    assert store.attributes is not None and store.attributes["db.operation.name"] == "enqueue"
    (ack,) = _named(finished, "pinlater ack")
    (acked,) = _named(finished, "store ack_succeeded")
    assert acked.parent is not None and acked.parent.span_id == ack.context.span_id


def test_a_failed_store_call_is_an_error_span(
    spans: InMemorySpanExporter, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with JobService.from_settings(settings_for("memory"), source="trace-test") as svc:
        svc.create_queue(queue_name)

        def down(*args: object, **kwargs: object) -> None:
            raise ShardConnectionFailed("gone")

        monkeypatch.setattr(svc.core.shards.all()[0], "enqueue", down)
        with pytest.raises(ShardConnectionFailed, match="gone"):
            svc.enqueue(queue_name, [Job(b"x")])
    (store,) = _named(list(spans.get_finished_spans()), "store enqueue")
    assert store.status.status_code.name == "ERROR"
    assert [e.name for e in store.events] == ["exception"]


def test_store_calls_are_opentelemetry_metrics_with_the_names_and_units_of_metrics(queue_name: str) -> None:
    reader = InMemoryMetricReader()
    tracing.use_metrics(MeterProvider(metric_readers=[reader]))
    try:
        with JobService.from_settings(settings_for("memory"), source="metrics-test") as svc:
            svc.create_queue(queue_name)
            svc.enqueue(queue_name, [Job(b"a")])
            svc.enqueue(queue_name, [Job(b"b")])
            shard = svc.operators.shard_ids()[0]
    finally:
        tracing.use_metrics(None)
    data = reader.get_metrics_data()
    assert data is not None
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    points: list[Any] = list(found["pinlater_store_calls"].data.data_points)
    calls = {tuple(sorted(dict(p.attributes).items())): p.value for p in points}
    assert calls[(("op", "enqueue"), ("shard", shard))] == 2
    latency = found["pinlater_store_call"]
    assert latency.unit == "s"
    histogram: list[Any] = list(latency.data.data_points)
    (enqueues,) = [p for p in histogram if dict(p.attributes)["op"] == "enqueue"]
    assert enqueues.count == 2 and 0 < enqueues.sum < 5
