"""The PinLater Thrift interface: the IDL (``pinlater.thrift``, written from
the wire contract), the server (``pinlater.thrift.server``) and the client
(``pinlater.thrift_client``).

``idl`` is the IDL loaded by thriftpy2 (structs, enums, the ``PinLater``
service), parsed once at import time.
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
service: ModuleType = idl.PinLater

__all__ = ["DEFAULT_METRICS_PORT", "DEFAULT_SERVER_PORT", "IDL_PATH", "idl", "service"]
