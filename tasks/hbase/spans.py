"""The one wrapper the Thrift1 and Thrift2 pools put around an HBase call,
retries included: reported to the job service's seam (``pinlater.observe.seam``)
as an app's store call, so it is counted and timed on ``/metrics`` and in
OpenTelemetry, and traced as a span ``hbase <operation>`` when tracing is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pinlater.observe.seam import app_call

T = TypeVar("T")


def traced(cluster: str, operation: str, transport: str, work: Callable[[], T]) -> T:
    """``work()``, as the call ``operation`` to the HBase cluster ``cluster``."""
    attributes = {"db.system": "hbase", "db.operation.name": operation, "pinlater.hbase.cluster": cluster,
                  "pinlater.hbase.transport": transport}
    return app_call("hbase", cluster, operation, work, attributes)
