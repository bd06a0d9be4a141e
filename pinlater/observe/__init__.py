"""Observability: the call seam's metrics, tracing, OpenTelemetry export."""
