"""The OpenTelemetry side of ``pinlater.observe.tracing``, imported only when
tracing is on (the ``otel`` extra)."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode

    from pinlater.observe.metrics import Family
except ImportError as exc:  # pragma: no cover -- the extra is missing
    raise ImportError(
        "OTEL_TRACES_EXPORTER is set but OpenTelemetry is not installed: pip install 'pinlater-py[otel]'"
    ) from exc

SCOPE = "pinlater"
KINDS = {"client": SpanKind.CLIENT, "server": SpanKind.SERVER, "producer": SpanKind.PRODUCER,
         "consumer": SpanKind.CONSUMER, "internal": SpanKind.INTERNAL}


class FileSpanExporter(SpanExporter):
    """Appends each finished span to a file as one JSON object per line
    (``pinlater trace`` reads them); several processes may share the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), separators=(",", ":")) + "\n" for s in spans)
        with self._lock:
            # One write of whole lines in append mode: lines of processes
            # writing at once do not interleave within a line.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
            finally:
                os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def span_record(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None  # a finished span of the SDK has one
    parent = span.parent
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "name": span.name,
        "kind": span.kind.name.lower(),
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name.lower(),
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "service": span.resource.attributes.get("service.name"),
    }


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "pinlater_file":
        path = os.environ.get("PINLATER_TRACES_FILE")
        if not path:
            raise ValueError("OTEL_TRACES_EXPORTER=pinlater_file needs PINLATER_TRACES_FILE (the file to append to)")
        return FileSpanExporter(path)
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ValueError(
                "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http installed"
            ) from exc
        return OTLPSpanExporter()  # type: ignore[no-any-return]
    raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (console, otlp, pinlater_file or none)")


def setup(exporters: Sequence[str], service_name: str) -> Any:
    """The tracer, from the application's provider if it set one, else
    from a provider made here with ``exporters``."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        for name in exporters:
            if name != "none":
                provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        trace.set_tracer_provider(provider)
    return provider.get_tracer(SCOPE)


# -- metrics ----------------------------------------------------------------------------
# The instruments of the store calls, named so that an OpenTelemetry
# Prometheus exporter shows the names and units of /metrics.
_instruments: dict[str, Any] = {}


def _metric_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        except ImportError as exc:
            raise ValueError(
                "OTEL_METRICS_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http installed"
            ) from exc
        return OTLPMetricExporter()
    raise ValueError(f"OTEL_METRICS_EXPORTER: unknown exporter {name!r} (console, otlp or none)")


def setup_metrics(exporters: Sequence[str], service_name: str) -> None:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    provider = metrics.get_meter_provider()
    if not isinstance(provider, MeterProvider):
        readers = [PeriodicExportingMetricReader(_metric_exporter(name)) for name in exporters if name != "none"]
        provider = MeterProvider(metric_readers=readers,
                                 resource=Resource.create({"service.name": service_name}))
        metrics.set_meter_provider(provider)
    use_meter_provider(provider)


def use_meter_provider(provider: Any) -> None:
    global _instruments
    meter = provider.get_meter(SCOPE)
    made: dict[str, Any] = {"meter": meter}
    made["server_seconds"] = meter.create_histogram(
        "pinlater_server_request", unit="s", description="Thrift call latency, by method.")
    for group, (prefix, calls, errors, seconds) in _STORE_INSTRUMENTS.items():
        made[f"store:{group}"] = (
            meter.create_counter(f"{prefix}_calls", description=calls),
            meter.create_counter(f"{prefix}_errors", description=errors),
            meter.create_histogram(f"{prefix}_call", unit="s", description=seconds),
        )
    _instruments = made  # one assignment: a store call recording meanwhile sees the old set or the new


# Each group of store calls: its instruments' name prefix and descriptions (as
# the families of ``pinlater.observe.seam``).
_STORE_INSTRUMENTS = {
    None: ("pinlater_store", "Store calls made by the job service, by shard and operation.",
           "Store calls that failed, by shard, operation and error.", "Store call latency, by shard and operation."),
    "app": ("pinlater_app_store", "Store calls made by the apps, by store, shard and operation.",
            "The apps' store calls that failed, by store, shard, operation and error.",
            "The apps' store call latency, by store, shard and operation."),
}


def record_store_call(store: str | None, shard: str, op: str, seconds: float, error: str | None) -> None:
    """A store call: the job service's (``store`` None) or an app's to a store of that kind."""
    if store is None:
        labels, (calls, errors, latency) = {"shard": shard, "op": op}, _instruments["store:None"]
    else:
        labels, (calls, errors, latency) = {"store": store, "shard": shard, "op": op}, _instruments["store:app"]
    calls.add(1, labels)
    latency.record(seconds, labels)
    if error is not None:
        errors.add(1, {**labels, "error": error})


def record_server_call(method: str, seconds: float) -> None:
    _instruments["server_seconds"].record(seconds, {"method": method})


# How long one reading of the families serves the observable instruments:
# one collection calls every instrument's callback, back to back.
_READ_FOR_S = 0.5


def observe(source: Callable[[], Iterable[Family]], leave_out: tuple[str, ...]) -> None:
    """Every counter and gauge family that ``source()`` returns, as an
    observable instrument named as ``Family.otel_name_and_unit`` says. The
    families are those of a first reading now; ``leave_out``: prefixes of
    families recorded as instruments of their own. Histograms and summaries
    are left to those (OpenTelemetry has no observable histogram)."""
    meter = _instruments["meter"]
    lock = threading.Lock()
    cache: dict[str, Any] = {"at": -math.inf, "families": {}}

    def read() -> dict[str, Family]:
        return {f.name: f for f in source()}

    def families() -> dict[str, Family]:
        with lock:
            if time.monotonic() - cache["at"] > _READ_FOR_S:
                cache["families"], cache["at"] = read(), time.monotonic()
            return cache["families"]  # type: ignore[no-any-return]

    def callback_for(name: str) -> Callable[[Any], Iterator[Observation]]:
        def observe(_options: Any) -> Iterator[Observation]:
            family = families().get(name)
            for _, labels, value in family.samples if family else ():
                if math.isfinite(value):  # the SDK drops others (an unlimited rate's +Inf) with a warning
                    yield Observation(value, dict(labels))

        return observe

    for family in read().values():
        if family.name.startswith(leave_out) or family.kind not in ("counter", "gauge"):
            continue
        name, unit = family.otel_name_and_unit
        make = meter.create_observable_counter if family.kind == "counter" else meter.create_observable_gauge
        make(name, callbacks=[callback_for(family.name)], unit=unit)


def tracer_of(provider: Any) -> Any:
    return provider.get_tracer(SCOPE)


def flush() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()


# -- spans ------------------------------------------------------------------------------
def start_store_span(tracer: Any, op: str, shard: str, queue: str | None) -> Any:
    attributes = {"db.operation.name": op, "pinlater.shard": shard}
    if queue is not None:
        attributes["pinlater.queue"] = queue
    return tracer.start_span(f"store {op}", kind=SpanKind.CLIENT, attributes=attributes)


def end_span(span: Any, error: BaseException | None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}"))
    span.end()


@contextmanager
def span(
    tracer: Any,
    name: str,
    kind: str,
    attributes: Mapping[str, Any],
    parent: Mapping[str, str] | None,
    links: Sequence[Mapping[str, str]],
) -> Iterator[Any]:
    """A span made current for the block; ``parent``: a carrier whose
    context it continues instead of the current one; ``links``: carriers
    of spans it follows from."""
    ctx = propagate.extract(parent) if parent is not None else None
    link_list = []
    for carrier in links:
        linked = trace.get_current_span(propagate.extract(carrier)).get_span_context()
        if linked.is_valid:
            link_list.append(Link(linked))
    with tracer.start_as_current_span(
        name, context=ctx, kind=KINDS[kind], attributes=dict(attributes), links=link_list,
        record_exception=True, set_status_on_exception=True,
    ) as current:
        yield current


def begin(tracer: Any, name: str, kind: str, attributes: Mapping[str, Any],
          parent: Mapping[str, str] | None) -> tuple[Any, object]:
    ctx = propagate.extract(parent) if parent is not None else None
    current = tracer.start_span(name, context=ctx, kind=KINDS[kind], attributes=dict(attributes))
    return current, otel_context.attach(trace.set_span_in_context(current))


def finish(handle: tuple[Any, object], error: str | None) -> None:
    current, token = handle
    otel_context.detach(token)  # type: ignore[arg-type]
    if error is not None:
        current.set_status(Status(StatusCode.ERROR, error))
    current.end()


def inject() -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def set_attributes(attributes: Mapping[str, Any]) -> None:
    trace.get_current_span().set_attributes(dict(attributes))
