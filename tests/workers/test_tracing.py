"""Traces of tasks on PinLater: a publish and every run of its job are one
trace, whatever process runs it and however late; a raw job's run
continues the trace stored with the job; a run that publishes its own task
again (a chain) hangs the publish beside the earlier ones and links it to
the run; each attempt of a retried job is a run of the same trace; a run
says how long its job waited in its queue."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pinlater.cli import main
from pinlater.client_api import PinLaterClient
from pinlater.models import Job
from pinlater.observe import tracing
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient
from tests.support.spans import spans_in_memory
from tests.support.waits import wait_until
from tests.workers.celery_tasks import qname
from tests.workers.harness import Processes

BOTH = pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)


@pytest.fixture
def published() -> Iterator[InMemorySpanExporter]:
    """The test process's spans: its publishes."""
    with spans_in_memory() as exporter:
        yield exporter


@pytest.fixture
def traced_procs(procs: Processes, tmp_path: Path) -> tuple[Processes, Path]:
    """Workers that write their spans to a file, a fifth of a second apart."""
    traces = tmp_path / "worker-traces.jsonl"
    procs.env.update(OTEL_TRACES_EXPORTER="pinlater_file", PINLATER_TRACES_FILE=str(traces),
                     OTEL_SERVICE_NAME="trace-worker", OTEL_BSP_SCHEDULE_DELAY="200")
    return procs, traces


def _published(exporter: InMemorySpanExporter, task: str) -> list[ReadableSpan]:
    """The publish spans of ``task``; the job service's spans of the
    enqueue are their children."""
    spans = exporter.get_finished_spans()
    publishes = [s for s in spans if s.name == f"publish {task}"]
    for s in spans:
        if s.name in ("client enqueueJobs", "pinlater enqueue"):
            assert s.parent is not None and s.parent.span_id in {p.context.span_id for p in publishes}
    return publishes


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@BOTH
@pytest.mark.timeout(90)
def test_a_chain_of_jobs_is_one_trace_from_the_first_publish(
    app: Celery, published: InMemorySpanExporter, traced_procs: tuple[Processes, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    procs, traces = traced_procs
    app.tasks["tests.w_chain"].delay(2)
    (first_publish,) = _published(published, "tests.w_chain")
    trace_id = f"{first_publish.context.trace_id:032x}"

    procs.worker("chain", [qname("w_chain")], 1)
    wait_until(lambda: len([s for s in _spans(traces) if s["name"] == "run tests.w_chain"]) == 3, 40,
               what="three runs of the chain in the trace file")
    spans = _spans(traces)
    assert {s["trace_id"] for s in spans if "w_chain" in s["name"]} == {trace_id}
    by_id = {s["span_id"]: s for s in spans}
    runs = sorted((s for s in spans if s["name"] == "run tests.w_chain"), key=lambda s: s["start_ns"])
    # The first run continues the test's publish. Each later run is the
    # child of a publish made by the run before it, which hangs under the
    # chain's origin (the test's publish) and links to that run: the chain
    # stays flat however long it grows.
    origin = f"{first_publish.context.span_id:016x}"
    assert runs[0]["parent_id"] == origin
    for before, after in itertools.pairwise(runs):
        publish = by_id[after["parent_id"]]
        assert publish["name"] == "publish tests.w_chain" and publish["parent_id"] == origin
        assert publish["links"] == [{"trace_id": trace_id, "span_id": before["span_id"]}]
    for run in runs:
        assert run["kind"] == "consumer" and run["service"] == "trace-worker"
        assert run["attributes"]["pinlater.queue"] == qname("w_chain")
        assert run["attributes"]["pinlater.descriptor"].startswith(qname("w_chain") + ":")
        assert 0 <= run["attributes"]["pinlater.queue_wait_ms"] < 30_000
    # The publishes from the runs reached the job service inside their span:
    # the enqueue's spans (client-side through a server, else the service's
    # and its store call) are children of the publish.
    below = {by_id[s["parent_id"]]["name"] for s in spans
             if s["parent_id"] in by_id and s["name"] in ("client enqueueJobs", "pinlater enqueue")}
    assert below == {"publish tests.w_chain"}

    # `pinlater trace` prints it as a tree: each run one level below the
    # publish that made its job, with its wait in the queue; the origin is
    # the test process's, not in the file, so the first run and the later
    # publishes are roots, and each publish says which run it follows.
    first = runs[0]["attributes"]["pinlater.descriptor"]
    assert main(["trace", str(traces), "--where", f"pinlater.descriptor={first}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"trace {trace_id}: ")
    labels = [line.split(" ms  ", 1)[1] for line in out[1:]]
    run_labels = [label for label in labels if label.lstrip().startswith("run tests.w_chain")]
    assert [(len(label) - len(label.lstrip(" "))) // 2 for label in run_labels] == [0, 1, 1]
    assert all(f"ms in {qname('w_chain')}" in label for label in run_labels)
    follows = [label for label in labels if label.lstrip().startswith("publish tests.w_chain")]
    assert len(follows) == 2 and all("follows run tests.w_chain at " in label for label in follows)


@BOTH
@pytest.mark.timeout(90)
def test_the_attempts_of_a_retried_job_are_runs_of_one_trace(
    app: Celery, published: InMemorySpanExporter, traced_procs: tuple[Processes, Path]
) -> None:
    procs, traces = traced_procs
    app.tasks["tests.w_flaky"].delay()
    (publish,) = _published(published, "tests.w_flaky")
    procs.worker("flaky", [qname("w_flaky")], 1)
    wait_until(lambda: len([s for s in _spans(traces) if s["name"] == "run tests.w_flaky"]) == 2, 40,
               what="two attempts in the trace file")
    runs = sorted((s for s in _spans(traces) if s["name"] == "run tests.w_flaky"), key=lambda s: s["start_ns"])
    assert {r["trace_id"] for r in runs} == {f"{publish.context.trace_id:032x}"}
    assert {r["parent_id"] for r in runs} == {f"{publish.context.span_id:016x}"}
    assert [r["status"] for r in runs] == ["error", "unset"]
    assert [r["attributes"]["pinlater.attempt"] for r in runs] == [1, 2]


@BOTH
@pytest.mark.timeout(90)
def test_a_raw_jobs_run_continues_the_trace_stored_with_it(
    app: Celery, service: JobService, env: dict[str, str], published: InMemorySpanExporter,
    traced_procs: tuple[Processes, Path],
) -> None:
    """A body that is not a Celery message has no headers to carry a trace:
    the job service stores the enqueue's span with the job (through a
    server that does not trace, the client's span), and the run continues
    it, with its wait counted from when the job was runnable."""
    procs, traces = traced_procs
    app.tasks["tests.w_raw"]  # the queue is created with its task's config
    service.create_queue(qname("w_raw"))
    remote = env.get("PINLATER_SERVERS")
    client: PinLaterClient = ThriftClient([remote], source="raw-app") if remote else service
    with tracing.span("web request") as request_span:
        client.enqueue(qname("w_raw"), [Job(b"raw body")])
    if remote:
        client.close()
    enqueue_span = "client enqueueJobs" if remote else "pinlater enqueue"
    [enqueue] = [s for s in published.get_finished_spans() if s.name == enqueue_span]
    procs.worker("raw", [qname("w_raw")], 1)
    wait_until(lambda: any(s["name"] == "run tests.w_raw" for s in _spans(traces)), 40, what="the raw run")
    [run] = [s for s in _spans(traces) if s["name"] == "run tests.w_raw"]
    assert run["trace_id"] == f"{request_span.get_span_context().trace_id:032x}"
    assert run["parent_id"] == f"{enqueue.context.span_id:016x}"
    assert 0 <= run["attributes"]["pinlater.queue_wait_ms"] < 30_000
