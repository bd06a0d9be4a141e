"""The Prometheus text this project writes (``/metrics`` of the server and
the dashboard) read back as families, so that OpenTelemetry gets the same
metrics without a second set of instruments to keep in step
(``pinlater.observe.otel``). Read with prometheus_client's parser, which the
``otel`` extra installs."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Family:
    """A metric family: a counter's name is without ``_total`` (as
    OpenMetrics names the family); samples only for counters and gauges."""

    name: str
    kind: str  # counter, gauge, histogram, summary, ...
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    @property
    def otel_name_and_unit(self) -> tuple[str, str]:
        """The OpenTelemetry instrument an OpenTelemetry Prometheus exporter
        shows under this family's name: seconds become the unit ``s`` (the
        exporter adds ``_seconds`` back, and ``_total`` to a counter)."""
        if self.name.endswith("_seconds"):
            return self.name.removesuffix("_seconds"), "s"
        return self.name, ""


def parse(text: str) -> dict[str, Family]:
    """Family name -> its kind and, for a counter or gauge, its samples."""
    families = {}
    for metric in text_string_to_metric_families(text):
        family = Family(metric.name, metric.type)
        if metric.type in ("counter", "gauge"):
            family.samples = [(dict(s.labels), float(s.value)) for s in metric.samples]
        families[metric.name] = family
    return families
