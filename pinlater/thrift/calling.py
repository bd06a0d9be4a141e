"""How the Thrift client calls a server (``WireCalls``, which
``pinlater.thrift.client.ThriftClient`` is made of): the pool of servers
tried in turn, the retries of a call that may safely run twice, the trace
context carried along, and the fallback to the published interface when a
server lacks an extension method."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential, wait_random

from pinlater.errors import PinLaterError
from pinlater.kit.tls import ClientTls
from pinlater.observe import tracing
from pinlater.settings import default_source
from pinlater.thrift import STRUCTS, convert, idl
from pinlater.thrift.pool import CallFailed, ServerPool, ServerUnavailable, UnknownMethod
from pinlater.validation import check_source

log = logging.getLogger(__name__)
T = TypeVar("T")

# After a server answered UNKNOWN_METHOD for an extension, the client uses
# the published fallback for this long before asking again.
EXTENSION_RECHECK_S = 300.0
# Backoff between tries: this, then doubling (up to 1 s), plus up to 50 ms at random.
FIRST_RETRY_WAIT_S = 0.05


class WireCalls:
    def __init__(
        self,
        servers: Sequence[str],
        *,
        source: str | None,
        timeout_s: float,
        connect_timeout_s: float,
        retries: int,
        retry_deadline_s: float,
        pool_size: int,
        tls: ClientTls | None,
    ) -> None:
        self.source = check_source(source or default_source())
        self.servers = list(servers)
        self.retries = retries
        self.retry_deadline_s = retry_deadline_s
        self._lock = threading.Lock()
        # Extension method -> monotonic time until which it is taken as missing.
        self._missing: dict[str, float] = {}
        self._default_context = idl.RequestContext(source=self.source, requestId="")
        self._pool = ServerPool(
            self.servers, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, pool_size=pool_size,
            tls=tls.context() if tls is not None else None,
        )

    # -- plumbing --------------------------------------------------------------------
    def _context(self, source: str | None = None, request_id: str = "") -> Any:
        if source is None and not request_id:
            return self._default_context  # never changed once made
        return idl.RequestContext(source=check_source(source or self.source), requestId=request_id)

    def _call(self, method: str, /, *, idempotent: bool, **kwargs: Any) -> Any:
        if tracing.ON:
            with tracing.span(f"client {method}", {"rpc.system": "thrift", "rpc.method": method}, kind="client"):
                # The server continues this span (the IDL's trace context).
                context = kwargs["context"]
                kwargs["context"] = idl.PinLaterTracedRequestContext(
                    source=context.source, requestId=context.requestId, **tracing.context()
                )
                return self._call_once(method, idempotent=idempotent, **kwargs)
        return self._call_once(method, idempotent=idempotent, **kwargs)

    def _call_once(self, method: str, /, *, idempotent: bool, **kwargs: Any) -> Any:
        args_cls, result_cls = STRUCTS[method]
        args = args_cls(**kwargs)
        # The first try outside tenacity: setting up a Retrying costs about
        # as much as the rest of the client's work for a small call, and
        # nearly every call succeeds the first time.
        started = time.monotonic()
        try:
            result = self._pool.call(method, args, result_cls())
        except (ServerUnavailable, CallFailed) as exc:
            if not _retryable(exc, idempotent) or self.retries < 1:
                raise
            result = self._retry(method, args, result_cls, idempotent, started)
        error = getattr(result, "e", None)
        if error is not None:
            raise convert.from_wire_error(error)
        if "success" in result.__dict__:
            if result.success is None:
                raise PinLaterError(f"{method}: the server sent an empty reply")
            return result.success
        return None

    def _retry(self, method: str, args: Any, result_cls: Any, idempotent: bool, started: float) -> Any:
        """The tries after a first that failed retryably, with backoff."""
        time.sleep(FIRST_RETRY_WAIT_S + random.uniform(0, 0.05))
        retrying = Retrying(
            stop=stop_after_attempt(self.retries)
            | stop_after_delay(max(0.0, self.retry_deadline_s - (time.monotonic() - started))),
            wait=wait_exponential(multiplier=2 * FIRST_RETRY_WAIT_S, max=1.0) + wait_random(0, 0.05),
            retry=retry_if_exception(lambda exc: _retryable(exc, idempotent)),
            reraise=True,
        )
        return retrying(lambda: self._pool.call(method, args, result_cls()))

    def _extension(self, method: str, fallback: Callable[[], T], /, **kwargs: Any) -> Any:
        """Calls an extension method; against a server without it, runs
        ``fallback`` (the published way) instead, with a warning."""
        with self._lock:
            missing_until = self._missing.get(method, 0.0)
        if missing_until <= time.monotonic():
            try:
                return self._call(method, idempotent=True, **kwargs)
            except UnknownMethod:
                with self._lock:
                    self._missing[method] = time.monotonic() + EXTENSION_RECHECK_S
                log.warning(
                    "PinLater server %s has no %s (a server without this project's extensions): "
                    "using the published interface for %.0fs",
                    self.servers, method, EXTENSION_RECHECK_S,
                )
        return fallback()


def _retryable(exc: BaseException, idempotent: bool) -> bool:
    return isinstance(exc, ServerUnavailable) or (idempotent and isinstance(exc, CallFailed))
