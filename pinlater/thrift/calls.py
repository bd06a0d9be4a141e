"""One call on a connection of a framed Thrift server (``CallDispatch``,
which ``pinlater.thrift.server.FramedServer`` is made of): its header read,
its method checked against the caller's role, its frame walked within the
method's bounds, then decoded, run on the handler as the caller, and
answered. A request dropped unread is answered from its header alone.

What differs between services is in the hooks at the end of
``CallDispatch`` (how errors go on the wire, what a call's arguments must
also pass): the job service's ``ThriftServer`` overrides them, and so does
an app's service on the same kit. Every method's result struct names its
exception field ``e``."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from thriftpy2.thrift import TApplicationException

from pinlater.engine.caller import Caller, calling_as
from pinlater.observe import tracing
from pinlater.thrift import access
from pinlater.thrift.bounds import CallBounds
from pinlater.thrift.framing import CALL, EXCEPTION, ONEWAY, REPLY, Frame, FrameError, decode_message, encode_message
from pinlater.thrift.security import Security
from pinlater.thrift.stats import UNKNOWN_METHOD, ServerStats
from pinlater.thrift.walk import Header, OverLimit, check_body, read_header

log = logging.getLogger(__name__)

Signature = tuple[Any, Any, tuple[str, ...]]


def signatures(structs: dict[str, tuple[Any, Any]]) -> dict[str, Signature]:
    """Per method: its argument and result structs and the argument names in order."""
    return {name: (args, result, tuple(spec[1] for spec in args.thrift_spec.values()))
            for name, (args, result) in structs.items()}


class CallDispatch:
    """The server's calls, over the state the server holds."""

    service_name: str  # in "no method 'x' in <service_name>"
    methods: dict[str, Signature]
    handler: Any
    security: Security
    bounds: dict[str, CallBounds]
    stats: ServerStats
    _call_slots: threading.BoundedSemaphore
    _class_slots: dict[str, threading.BoundedSemaphore]
    _last_denial_log: dict[tuple[str, str], float]

    # -- one call ------------------------------------------------------------------------
    def handle(self, frame: Frame, names: tuple[str, ...] = (), peer: str = "") -> tuple[bytes | None, bool]:
        """(reply to send or None, whether the connection stays usable);
        ``names``: the client certificate's, checked against the roles;
        ``peer``: the client's address.

        An unknown method, or one outside the caller's role, is answered
        from the message header alone. Then the frame is walked within the
        method's bounds (``pinlater.thrift.bounds``), and only a frame
        within them is decoded: what a call costs before it reaches the
        job service is bounded by its header and its own limits, not by
        the frame's size."""
        try:
            header, pos = read_header(frame)
        except FrameError as exc:
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"malformed message: {exc}"), False
        if header.mtype not in (CALL, ONEWAY):
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"message type {header.mtype} is not a call"), False
        name = header.name
        signature = self.methods.get(name)
        if signature is None:
            self.stats.record(UNKNOWN_METHOD, 0.0, "UNKNOWN_METHOD")
            unknown = TApplicationException(TApplicationException.UNKNOWN_METHOD,
                                            f"no method {name!r} in {self.service_name}")
            return encode_message(name, EXCEPTION, header.seqid, unknown), True
        args_cls, result_cls, fields = signature
        roles = self.security.access
        grant = None
        if roles is not None:
            grant = roles.grant_for(names)
            try:
                self._authorize(grant, names, name, None)
            except access.AccessDenied as exc:
                return self._refused(header, result_cls, exc), True
        limits = self.bounds[name]
        try:
            check_body(frame, pos, limits.bounds)
        except OverLimit as exc:
            return self._refused(header, result_cls, limits.refusal(exc)), True
        except FrameError as exc:
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"malformed message: {exc}"), False
        try:
            args = decode_message(frame, args_cls())
        except Exception as exc:  # noqa: BLE001 -- anything the decoder throws is the frame's fault
            self.stats.count("bad_frames")
            return self._protocol_error(frame, f"undecodable {name} arguments: {exc}"), False
        result = result_cls()
        started = time.perf_counter()
        code: str | None = None
        self.stats.count("in_flight")
        try:
            if roles is not None:
                self._authorize(grant, names, name, args)
            # Who calls, for the admin-secret throttle and queue creation (pinlater.engine.caller).
            identity = grant.identity if grant else names[0] if names else peer
            who = Caller(identity, grant is None or grant.creates_queues)
            with self._class_slots.get(name, self._call_slots), calling_as(who):
                given = args.__dict__
                method = getattr(self.handler, name)
                if tracing.ON:
                    with tracing.span(f"server {name}", {"rpc.system": "thrift", "rpc.method": name},
                                      kind="server", parent=self.trace_parent(given)):
                        value = method(*[given[field] for field in fields])
                else:
                    value = method(*[given[field] for field in fields])
            if grant is not None:
                value = self.filter_result(grant, name, value)
            if "success" in result.__dict__:
                result.success = value
        except Exception as exc:  # must answer, never crash
            wire = self.wire_error(exc)
            if wire is None:
                log.exception("%s failed unexpectedly", name)
                wire = self.internal_error(f"internal error in {name}: {type(exc).__name__}: {exc}")
            else:
                log.debug("%s: %s: %s", name, wire[1], exc)
            result.e, code = wire
        finally:
            self.stats.record(name, time.perf_counter() - started, code, finished_call=True)
        if header.mtype == ONEWAY:
            return None, True
        try:
            return encode_message(name, REPLY, header.seqid, result), True
        except Exception as exc:
            log.exception("could not encode the %s reply", name)
            app = TApplicationException(TApplicationException.INTERNAL_ERROR, f"could not encode the reply: {exc}")
            return encode_message(name, EXCEPTION, header.seqid, app), True

    def _authorize(self, grant: access.Grant | None, names: tuple[str, ...], method: str, args: Any) -> None:
        """The method alone (``args`` None: from the header), or the whole
        decoded call (its queues too)."""
        try:
            checked = access.check_method(grant, names, method)
            if args is not None:
                self.check_arguments(checked, names, method, args)
        except access.AccessDenied as exc:
            self.stats.count("calls_denied")
            # The identity and the method, never the arguments; a client
            # retrying in a loop writes one line a second.
            key = (grant.identity if grant else "", method)
            now = time.monotonic()
            if now - self._last_denial_log.get(key, 0.0) >= 1.0:
                if len(self._last_denial_log) > 10_000:
                    self._last_denial_log.clear()
                self._last_denial_log[key] = now
                log.warning("denied: %s", exc.message)
            raise

    def admits(self, head: bytes, names: tuple[str, ...]) -> bool:
        """Whether a large request is worth buffering: not when its header
        names no method of ours, or one outside the caller's role. Such a
        request is drained unbuffered and ``handle`` answers it from the
        header alone, as it would have once buffered."""
        try:
            header, _ = read_header(head)
        except FrameError:
            return True  # ``handle`` says what is wrong with it
        if header.name not in self.methods:
            return False
        roles = self.security.access
        if roles is None:
            return True
        grant = roles.grant_for(names)
        return grant is not None and grant.may_call(header.name)

    def _refused(self, header: Header, result_cls: Any, error: Exception) -> bytes | None:
        """The reply to a call refused before its arguments were decoded."""
        wire = self.wire_error(error)
        if wire is None:  # a hook gave an error its service does not send
            wire = self.internal_error(f"{header.name} refused: {error}")
        self.stats.record(header.name, 0.0, wire[1])
        log.debug("%s refused before decoding: %s: %s", header.name, wire[1], error)
        if header.mtype == ONEWAY:
            return None
        result = result_cls()
        result.e = wire[0]
        return encode_message(header.name, REPLY, header.seqid, result)

    @staticmethod
    def _protocol_error(frame: Frame, message: str) -> bytes | None:
        """An EXCEPTION reply if the header can be read at all."""
        try:
            header, _ = read_header(frame)
        except FrameError:
            return None
        exc = TApplicationException(TApplicationException.PROTOCOL_ERROR, message)
        return encode_message(header.name, EXCEPTION, header.seqid, exc)

    def refusal_reply(self, head: bytes, message: str) -> bytes | None:
        """The error answering a request that was read and dropped unseen
        (over the frame limit, or no room to buffer it), if its header
        names one of our methods."""
        try:
            header, _ = read_header(head)
        except FrameError:
            return None
        signature = self.methods.get(header.name)
        if signature is None:
            return None
        result = signature[1]()
        result.e, code = self.refusal_error(header.name, message)
        self.stats.record(header.name, 0.0, code)
        return encode_message(header.name, REPLY, header.seqid, result)

    # -- what each service says (the job service's in pinlater.thrift.server) ------------
    def wire_error(self, exc: Exception) -> tuple[Any, str] | None:
        """``exc`` as the service's exception struct and the error code the
        stats count it under; None when it is not one of the service's
        errors (the call then fails as an internal error)."""
        raise NotImplementedError

    def internal_error(self, message: str) -> tuple[Any, str]:
        """The exception struct and code of an unexpected failure."""
        raise NotImplementedError

    def refusal_error(self, method: str, message: str) -> tuple[Any, str]:
        """The exception struct and code answering a request dropped unread
        (over the frame limit, or no room to buffer it)."""
        raise NotImplementedError

    def check_arguments(self, grant: access.Grant, names: tuple[str, ...], method: str, args: Any) -> None:
        """What a decoded call must also pass, beyond the caller's role
        allowing its method (raise access.AccessDenied)."""

    def filter_result(self, grant: access.Grant, method: str, value: Any) -> Any:
        """What a caller with roles sees of a call's result."""
        return value

    def trace_parent(self, given: dict[str, Any]) -> Any:
        """The caller's trace context in a call's arguments, if any."""
        return None
