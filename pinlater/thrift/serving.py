"""The Thrift server kit, for a service of an app's own (the typeahead's
Contacts Service): what the job service's server is made of, without the
job service.

A service subclasses ``FramedServer`` with its IDL's methods
(``signatures``), each method's bounds (``bounds_of``: the lists a call may
hold and the error of a frame past them), its roles table (``Security``),
its stats layout (``StatsLayout``: methods, error codes, metric prefix),
and the hooks of ``pinlater.thrift.calls.CallDispatch`` that say how its
errors go on the wire. Each method's result struct names its exception
field ``e``.
"""

from pinlater.thrift.access import AccessDenied
from pinlater.thrift.bounds import CallBounds, Limit, bounds_of
from pinlater.thrift.calls import Signature, signatures
from pinlater.thrift.convert import trace_carrier
from pinlater.thrift.security import Security, check_exposure
from pinlater.thrift.server import FramedServer
from pinlater.thrift.stats import ServerStats, StatsLayout

__all__ = [
    "AccessDenied", "CallBounds", "FramedServer", "Limit", "Security", "ServerStats", "Signature", "StatsLayout",
    "bounds_of", "check_exposure", "signatures", "trace_carrier",
]
