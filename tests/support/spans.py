"""Spans of the test process, kept in memory (OpenTelemetry's in-memory
exporter) while tracing is on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pinlater.observe import tracing


@contextmanager
def spans_in_memory() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every span exported at once to the
    returned exporter; off again after it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
