"""The PinLater Thrift interface: the IDL (``pinlater.thrift``, written from
the wire contract), the server (``pinlater.thrift.server``) and the client
(``pinlater.thrift_client``).

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
published: ModuleType = idl.PinLater
service: ModuleType = idl.PinLaterExtended
EXTENSION_METHODS = frozenset(service.thrift_services) - frozenset(published.thrift_services)
# Per method of ``service``: its argument and result structs.
STRUCTS: dict[str, tuple[Any, Any]] = {
    name: (getattr(service, name + "_args"), getattr(service, name + "_result")) for name in service.thrift_services
}

__all__ = [
    "DEFAULT_METRICS_PORT", "DEFAULT_SERVER_PORT", "EXTENSION_METHODS", "IDL_PATH", "STRUCTS", "idl", "published",
    "service",
]
