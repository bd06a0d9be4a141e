"""Who is calling the job service, for the checks that depend on it: the
admin-secret throttle counts wrong secrets per caller, and a caller without
the right to create queues may only declare one that exists.

The Thrift server sets the caller around each call (its client
certificate's identity, or else its address; whether its role creates
queues). Code that calls a ``JobService`` in its own process is the
process itself, with every right, as it has the stores' credentials anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Caller:
    identity: str
    creates_queues: bool = True


IN_PROCESS = Caller("in-process")
_CURRENT: ContextVar[Caller] = ContextVar("pinlater_caller", default=IN_PROCESS)


def current() -> Caller:
    """The caller of the service call in progress in this thread."""
    return _CURRENT.get()


@contextmanager
def calling_as(caller: Caller) -> Iterator[None]:
    token = _CURRENT.set(caller)
    try:
        yield
    finally:
        _CURRENT.reset(token)
