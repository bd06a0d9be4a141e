"""One call on a connection of the Thrift server (``CallDispatch``, which
``pinlater.thrift.server.ThriftServer`` is made of): its header read, its
method checked against the caller's role, its frame walked within the
method's bounds, then decoded, run on the handler as the caller, and
answered. A request dropped unread is answered from its header alone."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from thriftpy2.thrift import TApplicationException

from pinlater.engine.caller import Caller, calling_as
from pinlater.errors import ErrorCode, PinLaterError
from pinlater.observe import tracing
from pinlater.service import JobService
from pinlater.thrift import STRUCTS, access, idl
from pinlater.thrift.bounds import CallBounds
from pinlater.thrift.convert import to_wire_error, trace_carrier
from pinlater.thrift.framing import CALL, EXCEPTION, ONEWAY, REPLY, Frame, FrameError, decode_message, encode_message
from pinlater.thrift.security import Security
from pinlater.thrift.stats import UNKNOWN_METHOD, ServerStats
from pinlater.thrift.walk import Header, OverLimit, check_body, read_header

log = logging.getLogger(__name__)

METHODS = frozenset(STRUCTS)
# Per method: its argument and result structs and the argument names in order.
_SIGNATURES = {
    name: (args, result, tuple(spec[1] for spec in args.thrift_spec.values()))
    for name, (args, result) in STRUCTS.items()
}


class CallDispatch:
    """The server's calls, over the state the server holds."""

    service: JobService
    handler: Any
    security: Security
    bounds: dict[str, CallBounds]
    stats: ServerStats
    _call_slots: threading.BoundedSemaphore
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
        if name not in METHODS:
            self.stats.record(UNKNOWN_METHOD, 0.0, "UNKNOWN_METHOD")
            unknown = TApplicationException(TApplicationException.UNKNOWN_METHOD, f"no method {name!r} in PinLater")
            return encode_message(name, EXCEPTION, header.seqid, unknown), True
        args_cls, result_cls, fields = _SIGNATURES[name]
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
            with self._call_slots, calling_as(who):
                given = args.__dict__
                method = getattr(self.handler, name)
                if tracing.ON:
                    with tracing.span(f"server {name}", {"rpc.system": "thrift", "rpc.method": name},
                                      kind="server", parent=trace_carrier(given.get("context"))):
                        value = method(*[given[field] for field in fields])
                else:
                    value = method(*[given[field] for field in fields])
            if grant is not None and grant.queues is not None and name == "getQueueNames":
                value = {queue for queue in value if grant.may_touch(queue)}
            if "success" in result.__dict__:
                result.success = value
        except PinLaterError as exc:
            code = exc.code.name
            log.debug("%s: %s: %s", name, code, exc.message)
            result.e = to_wire_error(exc)
        except Exception as exc:  # must answer, never crash
            code = ErrorCode.UNKNOWN.name
            log.exception("%s failed unexpectedly", name)
            result.e = idl.PinLaterException(
                errorCode=int(ErrorCode.UNKNOWN), message=f"internal error in {name}: {type(exc).__name__}: {exc}"
            )
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
            if args is None:
                access.check_method(grant, names, method)
            else:
                access.check(grant, names, method, args, self._queue_exists)
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
        if header.name not in METHODS:
            return False
        roles = self.security.access
        if roles is None:
            return True
        grant = roles.grant_for(names)
        return grant is not None and grant.may_call(header.name)

    def _refused(self, header: Header, result_cls: Any, error: PinLaterError) -> bytes | None:
        """The reply to a call refused before its arguments were decoded."""
        self.stats.record(header.name, 0.0, error.code.name)
        log.debug("%s refused before decoding: %s: %s", header.name, error.code.name, error.message)
        if header.mtype == ONEWAY:
            return None
        result = result_cls()
        result.e = to_wire_error(error)
        return encode_message(header.name, REPLY, header.seqid, result)

    def _queue_exists(self, name: str) -> bool:
        self.service.queue_config(name)
        return True

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
        if header.name not in METHODS:
            return None
        code = ErrorCode.ENQUEUE_REJECTED if header.name == "enqueueJobs" else ErrorCode.UNKNOWN
        self.stats.record(header.name, 0.0, code.name)
        result = STRUCTS[header.name][1]()
        result.e = idl.PinLaterException(errorCode=int(code), message=message)
        return encode_message(header.name, REPLY, header.seqid, result)
