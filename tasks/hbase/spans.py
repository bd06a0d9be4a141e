"""A trace span per HBase call (``pinlater.observe.tracing``): the one wrapper the
Thrift1 and Thrift2 pools put around a call, retries included."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pinlater.observe import tracing

T = TypeVar("T")


def traced(cluster: str, operation: str, transport: str, work: Callable[[], T]) -> T:
    """``work()``, in a span ``hbase <operation>`` when tracing is on."""
    if not tracing.ON:
        return work()
    attributes = {"db.system": "hbase", "db.operation.name": operation, "pinlater.hbase.cluster": cluster,
                  "pinlater.hbase.transport": transport}
    with tracing.span(f"hbase {operation}", attributes, kind="client"):
        return work()
