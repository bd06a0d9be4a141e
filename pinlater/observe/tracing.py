"""OpenTelemetry tracing, optional and off by default.

On when ``OTEL_TRACES_EXPORTER`` names an exporter (``console``, ``otlp``,
or ``pinlater_file``, which appends spans as JSON lines to the file
``PINLATER_TRACES_FILE`` for ``pinlater trace``); off when it is unset or
``none``. ``OTEL_SERVICE_NAME`` names the process. ``configure`` reads them
once per process; every entry point (service, server, workers, client)
calls it. An application that set its own tracer provider keeps it; one
that configures OpenTelemetry in code calls ``use``.

Off, nothing here imports OpenTelemetry, and every instrumented place
costs one test of ``ON``. On, the ``otel`` extra must be installed.

What is traced: the job service's calls and every store call under them
(``pinlater.observe.seam``), the Thrift client's calls and the server's methods,
and the Celery tasks run by the workers (with their HBase and MySQL calls).
A job carries its trace context: a task's message holds it in its headers,
and every job's record can hold one too (its own, or the span current at
its enqueue), so a job run an hour after a web request enqueued it
continues that trace, whatever its body and whichever client enqueued it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pinlater.observe.metrics import Family

ON = False
# Store-call metrics through OpenTelemetry too (OTEL_METRICS_EXPORTER).
METRICS_ON = False
_configured = False
_lock = threading.Lock()
_tracer: Any = None

OFF_VALUES = ("", "none")
# Where a job's trace context travels: W3C trace context fields.
CARRIER_KEYS = ("traceparent", "tracestate")


def configure(default_service_name: str = "pinlater") -> bool:
    """Reads the ``OTEL_*`` environment once; True if tracing is on. A
    misconfiguration (an unknown exporter, the extra missing) raises."""
    global ON, METRICS_ON, _configured, _tracer
    if _configured:
        return ON
    with _lock:
        if _configured:
            return ON
        name = os.environ.get("OTEL_SERVICE_NAME") or default_service_name
        exporters = _named("OTEL_TRACES_EXPORTER")
        if exporters:
            from pinlater.observe import otel  # only now: OpenTelemetry is optional

            _tracer = otel.setup(exporters, name)
            ON = True
        metric_exporters = _named("OTEL_METRICS_EXPORTER")
        if metric_exporters:
            from pinlater.observe import otel

            otel.setup_metrics(metric_exporters, name)
            METRICS_ON = True
        _configured = True
    return ON


def _named(variable: str) -> list[str]:
    """The exporters a variable names; [] for unset or none."""
    names = [e.strip() for e in os.environ.get(variable, "").split(",") if e.strip()]
    return [] if all(e in OFF_VALUES for e in names) else names


def record_store_call(store: str | None, shard: str, op: str, seconds: float, error: str | None) -> None:
    """A store call, for the OpenTelemetry metrics (when on): the job
    service's (``store`` None) or an app's to a store of that kind."""
    from pinlater.observe import otel

    otel.record_store_call(store, shard, op, seconds, error)


def record_server_call(method: str, seconds: float) -> None:
    """A Thrift call's time, for the OpenTelemetry metrics (when on)."""
    from pinlater.observe import otel

    otel.record_server_call(method, seconds)


def observe_metrics(source: Callable[[], Iterable[Family]],
                    leave_out: tuple[str, ...] = ("pinlater_store_", "pinlater_app_store_")) -> None:
    """The counter and gauge families of ``source`` (``pinlater.observe.metrics``,
    read at each collection) through OpenTelemetry too, with the names and
    units of ``/metrics``; nothing when OpenTelemetry metrics are off.
    ``leave_out``: families this process records as instruments of their
    own (the store calls', in any process that makes them)."""
    if METRICS_ON:
        from pinlater.observe import otel

        otel.observe(source, leave_out)


def use(provider: Any) -> None:
    """Traces to ``provider`` (an OpenTelemetry ``TracerProvider``) from now
    on, whatever the environment says; ``None`` turns tracing off."""
    global ON, _configured, _tracer
    with _lock:
        if provider is None:
            ON, _tracer = False, None
        else:
            from pinlater.observe import otel

            ON, _tracer = True, otel.tracer_of(provider)
        _configured = True


def use_metrics(provider: Any) -> None:
    """Store-call metrics to ``provider`` (an OpenTelemetry ``MeterProvider``)
    from now on; ``None`` stops them."""
    global METRICS_ON
    with _lock:
        if provider is None:
            METRICS_ON = False
            return
        from pinlater.observe import otel

        otel.use_meter_provider(provider)
        METRICS_ON = True


def flush() -> None:
    """Exports the spans still buffered (before a process exits)."""
    if ON:
        from pinlater.observe import otel

        otel.flush()


@contextlib.contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: str = "internal",
    parent: Mapping[str, str] | None = None,
    links: Sequence[Mapping[str, str]] = (),
) -> Iterator[Any]:
    """A span around the block (None when tracing is off). ``parent``: a
    carrier (``context``) whose trace it continues; ``links``: carriers of
    spans it follows from, as a chained page follows the page that made it."""
    if not ON:
        yield None
        return
    from pinlater.observe import otel

    with otel.span(_tracer, name, kind, attributes or {}, parent, links) as current:
        yield current


def begin(
    name: str, attributes: Mapping[str, Any], *, kind: str = "internal", parent: Mapping[str, str] | None = None
) -> Any:
    """A span made current until ``finish``, for work that starts and ends
    in different callbacks (a Celery task's run); None when off."""
    if not ON:
        return None
    from pinlater.observe import otel

    return otel.begin(_tracer, name, kind, attributes, parent)


def finish(handle: Any, error: str | None = None) -> None:
    """Ends what ``begin`` started; ``error``: why it failed, if it did."""
    if handle is not None:
        from pinlater.observe import otel

        otel.finish(handle, error)


def context() -> dict[str, str]:
    """The current trace context as a carrier to store with a job ({} when off)."""
    if not ON:
        return {}
    from pinlater.observe import otel

    return otel.inject()


def traceparent() -> str | None:
    """The current span as a W3C traceparent (None: off, or no span)."""
    return context().get("traceparent")


def set_attributes(attributes: Mapping[str, Any]) -> None:
    """Attributes of the current span (nothing when off)."""
    if ON:
        from pinlater.observe import otel

        otel.set_attributes(attributes)


def start_store_span(op: str, shard: str, queue: str | None) -> Any:
    from pinlater.observe import otel

    return otel.start_store_span(_tracer, op, shard, queue)


def end_span(span: Any, error: BaseException | None) -> None:
    from pinlater.observe import otel

    otel.end_span(span, error)
