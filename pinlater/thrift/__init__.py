"""The PinLater Thrift interface: the IDL (``pinlater.thrift``, written from
the wire contract), the server (``pinlater.thrift.server``) and the client
(``pinlater.thrift.client``).

``idl`` is the IDL loaded by thriftpy2 (structs, enums, services), parsed
once at import time. ``service`` is ``PinLaterExtended``: the published
``PinLater`` methods and this server's extensions (marked as such in the
IDL), which the server dispatches and the client calls; ``published`` is
the published ``PinLater`` service alone.
"""

from __future__ import annotations

from importlib import resources
from types import ModuleType
from typing import Any

import thriftpy2

IDL_PATH = str(resources.files("pinlater.thrift").joinpath("pinlater.thrift"))
DEFAULT_SERVER_PORT = 9010
DEFAULT_METRICS_PORT = 9011

# The module name must end in "_thrift" for its structs to pickle.
idl: Any = thriftpy2.load(IDL_PATH, module_name="pinlater_wire_thrift")

# Published struct -> its superset with extension fields from 100 on: trace
# context, claims, fairness and unique keys, batches, error kinds (the IDL's extensions say why).
SUPERSETS = {
    idl.RequestContext: idl.PinLaterTracedRequestContext,
    idl.PinLaterJob: idl.PinLaterTracedJob,
    idl.PinLaterDequeueMetadata: idl.PinLaterTracedDequeueMetadata,
    idl.PinLaterJobAckInfo: idl.PinLaterClaimedJobAckInfo,
    idl.PinLaterCheckpointJobRequest: idl.PinLaterClaimedCheckpointJobRequest,
    idl.PinLaterJobInfo: idl.PinLaterKeyedJobInfo,
    idl.PinLaterEnqueueResponse: idl.PinLaterUniqueEnqueueResponse,
    idl.PinLaterEnqueueRequest: idl.PinLaterBatchEnqueueRequest,
    idl.PinLaterException: idl.PinLaterKindedException,
}


def _swap(value: Any, swapped: set[Any]) -> Any:
    if isinstance(value, tuple):
        return tuple(_swap(v, swapped) for v in value)
    if isinstance(value, type) and value in SUPERSETS:
        swapped.add(value)
        return SUPERSETS[value]
    return value


def _read_and_write_supersets() -> None:
    """Every field of a published struct type in any struct of the IDL
    (a call's arguments, a request's jobs or ACKs, a reply's metadata)
    takes its superset, so decoding keeps the extension fields. A struct's
    ``thrift_spec`` is how thriftpy2 describes it to its codecs; should
    that form change, this fails at import, not on the wire."""
    swapped: set[Any] = set()
    for name in dir(idl):
        holders = [getattr(idl, name)]
        if name in ("PinLater", "PinLaterExtended"):
            holders = [getattr(holders[0], f"{m}_{part}") for m in holders[0].thrift_services
                       for part in ("args", "result")]
        for cls in holders:
            spec = getattr(cls, "thrift_spec", None)
            if isinstance(spec, dict):
                cls.thrift_spec = {field_id: _swap(entry, swapped) for field_id, entry in spec.items()}
    if swapped != set(SUPERSETS):
        missing = sorted(t.__name__ for t in set(SUPERSETS) - swapped)
        raise ImportError(f"thriftpy2's struct specs are not as expected: found no field of type {missing}")


_read_and_write_supersets()
published: ModuleType = idl.PinLater
service: ModuleType = idl.PinLaterExtended
EXTENSION_METHODS = frozenset(service.thrift_services) - frozenset(published.thrift_services)
# Per method of ``service``: its argument and result structs.
STRUCTS: dict[str, tuple[Any, Any]] = {
    name: (getattr(service, name + "_args"), getattr(service, name + "_result")) for name in service.thrift_services
}

__all__ = [
    "DEFAULT_METRICS_PORT", "DEFAULT_SERVER_PORT", "EXTENSION_METHODS", "IDL_PATH", "STRUCTS", "SUPERSETS", "idl",
    "published", "service",
]
