"""Metrics as data: the one registry that ``/metrics`` (Prometheus text)
and OpenTelemetry both read.

A ``Family`` is a metric's name, type, help and samples. Whatever counts
something (the seam's store calls, the Thrift server's stats, the
dashboard's snapshot, an HTTP server's connections) is a *source*: a
function returning its families at the moment it is read. A ``Registry``
holds the sources of one endpoint; ``prometheus_text`` is the only writer
of the text format, and ``pinlater.observe.otel`` makes OpenTelemetry
instruments of the same families (no text read back).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
# A sample: the suffix of its name ("", "_bucket", "_sum", "_count"), its labels, its value.
Sample = tuple[str, Labels, float]
KINDS = frozenset({"counter", "gauge", "histogram", "summary"})


@dataclass(slots=True)
class Family:
    """One metric. ``name`` as ``/metrics`` spells it (a counter's with
    its ``_total`` where it has one); a histogram's or summary's samples
    carry their suffix."""

    name: str
    kind: str
    help: str
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: no metric type {self.kind!r} ({', '.join(sorted(KINDS))})")

    def add(self, value: float, suffix: str = "", /, **labels: object) -> Family:
        self.samples.append((suffix, tuple((k, str(v)) for k, v in labels.items()), value))
        return self

    @property
    def otel_name_and_unit(self) -> tuple[str, str]:
        """The OpenTelemetry instrument that an OpenTelemetry Prometheus
        exporter shows under this name: a counter without its ``_total``,
        seconds as the unit ``s`` (the exporter adds both back)."""
        name = self.name.removesuffix("_total") if self.kind == "counter" else self.name
        if name.endswith("_seconds"):
            return name.removesuffix("_seconds"), "s"
        return name, ""


Source = Callable[[], Iterable[Family]]


class Registry:
    """The sources of one ``/metrics``, read in the order registered."""

    def __init__(self, *sources: Source) -> None:
        self._sources = list(sources)

    def register(self, source: Source) -> None:
        self._sources.append(source)

    def collect(self) -> list[Family]:
        return [family for source in self._sources for family in source()]

    def text(self) -> str:
        return prometheus_text(self.collect())


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels) + "}" if labels else ""


def number(value: float) -> str:
    """A value as the text format spells it (Python's ``inf`` and ``nan``
    are not its spellings); a float in its shortest exact form."""
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def prometheus_text(families: Iterable[Family]) -> str:
    """The Prometheus text format (version 0.0.4) of ``families``."""
    lines = []
    for f in families:
        lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.kind}"]
        lines += [f"{f.name}{suffix}{_labels(labels)} {number(value)}" for suffix, labels, value in f.samples]
    return "\n".join(lines) + "\n" if lines else ""
