"""``/metrics`` text read back by prometheus_client's parser, the reference
reader of the format: a family per metric, as a scraper sees it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pinlater.observe.metrics import Family


def parse(text: str) -> dict[str, Family]:
    """Family name (a counter's without ``_total``, as the parser names it)
    -> the family; samples kept for counters and gauges."""
    families = {}
    for metric in text_string_to_metric_families(text):
        family = Family(metric.name, metric.type, metric.documentation)
        if metric.type in ("counter", "gauge"):
            for s in metric.samples:
                family.add(float(s.value), "", **s.labels)
        families[metric.name] = family
    return families
