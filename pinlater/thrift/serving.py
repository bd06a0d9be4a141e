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

A service of several processes on one port is a supervisor ``Program``
(``supervise``) whose children ``inherit`` the socket and stats table and
``serve_child`` their server.
"""

from pinlater.thrift.access import AccessDenied
from pinlater.thrift.bounds import CallBounds, Limit, bounds_of
from pinlater.thrift.calls import Signature, signatures
from pinlater.thrift.child import ChildOptions, Inherited, inherit
from pinlater.thrift.child import serve as serve_child
from pinlater.thrift.convert import trace_carrier
from pinlater.thrift.security import Security, check_exposure
from pinlater.thrift.server import FramedServer
from pinlater.thrift.stats import ServerStats, StatsLayout
from pinlater.thrift.supervisor import Program
from pinlater.thrift.supervisor import run as supervise

__all__ = [
    "AccessDenied", "CallBounds", "ChildOptions", "FramedServer", "Inherited", "Limit", "Program", "Security",
    "ServerStats", "Signature", "StatsLayout", "bounds_of", "check_exposure", "inherit", "serve_child", "signatures",
    "supervise", "trace_carrier",
]
