"""One client connection of the Thrift server and the thread that serves it:
reads frames within their deadline and the server's byte budget, hands
each to the server, sends the reply, and can be shed by the server."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
import threading
import time
from typing import Protocol

from pinlater.kit.tls import HANDSHAKE_RECORD, peer_names, reason
from pinlater.thrift.framing import (
    Frame,
    FrameError,
    FrameReader,
    FrameRejected,
    FrameScreened,
    FrameTimeout,
    FrameTooLarge,
    PeerClosed,
    set_timeout,
)
from pinlater.thrift.resources import STALL_S, ByteBudget
from pinlater.thrift.stats import ServerStats

log = logging.getLogger("pinlater.thrift.server")

_RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a reset


class ConnectionServer(Protocol):
    """What a connection needs of the server that accepted it (the
    ThriftServer), so that this module does not depend on the server's."""

    @property
    def max_frame(self) -> int: ...
    @property
    def frame_timeout_s(self) -> float: ...
    @property
    def idle_timeout_s(self) -> float: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def stats(self) -> ServerStats: ...
    @property
    def budget(self) -> ByteBudget: ...
    @property
    def tls_context(self) -> ssl.SSLContext | None: ...

    def handle(self, frame: Frame, names: tuple[str, ...] = (), peer: str = "") -> tuple[bytes | None, bool]:
        """(reply to send or None, whether the connection stays usable);
        ``names``: the client certificate's; ``peer``: the client's address."""

    def refusal_reply(self, head: bytes, message: str) -> bytes | None:
        """The error answering a request that was drained unread."""

    def admits(self, head: bytes, names: tuple[str, ...]) -> bool:
        """Whether a large request whose first bytes are ``head`` is worth
        buffering: False when its header alone refuses it."""

    def forget(self, conn: Connection) -> None:
        """Frees the slot of a connection that has closed."""


class Connection:
    """One client connection and its thread.

    ``busy``: a call is being handled (from its frame's last byte to its
    reply sent); a busy connection is never shed. ``closing``: it was shed
    or is being closed, its thread exits quietly. Both change under
    ``_lock``, and the socket is shut down and closed only under it."""

    def __init__(self, server: ConnectionServer, sock: socket.socket, address: str, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.address = address
        self.peer = peer
        self.reader = FrameReader(sock, server.max_frame, self._reserve, self._screen)
        self.busy = False
        self.closing = False
        # The client certificate's names (with TLS and client certificates).
        self.names: tuple[str, ...] = ()
        self._replied_at = 0.0
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name=f"pinlater-conn-{peer}", daemon=True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def run(self) -> None:
        server = self.server
        try:
            context = server.tls_context
            if context is not None and not self._start_tls(context):
                return
            while not server.stopping:
                try:
                    frame = self.reader.read_frame(
                        frame_timeout_s=server.frame_timeout_s, idle_timeout_s=server.idle_timeout_s
                    )
                except FrameTooLarge as exc:
                    server.stats.count("bad_frames")
                    message = f"request of {exc.size} bytes is over the server's limit of {exc.limit} bytes"
                    if exc.size > 4 * exc.limit or not self._drop(exc.size, message):
                        log.warning("closing connection from %s: %s", self.peer, exc)
                        return
                    log.warning("dropped a request from %s: %s", self.peer, exc)
                    continue
                except FrameRejected as exc:
                    server.stats.count("frames_over_budget")
                    message = (f"server busy: no room to buffer a request of {exc.size} bytes now "
                               f"(the server buffers at most {server.budget.capacity} bytes); retry later")
                    if not self._drop(exc.size, message):
                        log.info("closing connection from %s: %s", self.peer, exc)
                        return
                    log.info("refused a request from %s: %s", self.peer, exc)
                    continue
                except FrameScreened as exc:
                    # Drained unbuffered; the header alone makes the reply.
                    if not self._drop(exc.size, None):
                        return
                    continue
                except FrameTimeout as exc:
                    if not self.closing:
                        server.stats.count("frame_timeouts")
                        log.info("closing connection from %s: %s", self.peer, exc)
                    return
                except (FrameError, PeerClosed, OSError) as exc:
                    if not self.closing:
                        server.stats.count("bad_frames")
                        log.info("closing connection from %s: %s", self.peer, exc or type(exc).__name__)
                    return
                if frame is None:
                    return
                with self._lock:
                    if self.closing:  # shed as its last byte came in: the call never ran
                        return
                    self.busy = True
                try:
                    reply, keep = server.handle(frame, self.names, self.address)
                finally:
                    del frame
                    server.budget.release(self)
                if reply is not None:
                    set_timeout(self.sock, server.frame_timeout_s)
                    self.sock.sendall(reply)
                with self._lock:
                    self.busy = False
                    self._replied_at = time.monotonic()
                if not keep:
                    log.info("closed connection from %s after a malformed frame", self.peer)
                    return
        except OSError as exc:
            if not self.closing:
                log.info("connection from %s failed: %s", self.peer, exc)
        except Exception:  # a connection thread must never take the server down
            log.exception("connection from %s failed", self.peer)
        finally:
            self.close()
            server.budget.release(self)
            server.forget(self)

    def _start_tls(self, context: ssl.SSLContext) -> bool:
        """The TLS handshake, whole within the frame timeout; False (and
        counted) if it failed. A peer whose first byte is not a TLS
        handshake record (a plain Thrift client) is closed before any TLS
        work is done."""
        server = self.server
        deadline = time.monotonic() + server.frame_timeout_s
        try:
            self.sock.settimeout(server.frame_timeout_s)
            first = self.sock.recv(1, socket.MSG_PEEK)
            if not first:
                return False
            if first[0] != HANDSHAKE_RECORD:
                server.stats.count("tls_plaintext_refused")
                log.debug("closed a connection from %s that does not speak TLS", self.peer)
                with contextlib.suppress(OSError):
                    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
                return False
            with self._lock:
                if self.closing:
                    return False
                self.sock = context.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
                self.reader.sock = self.sock
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            self.sock.do_handshake()
            self.names = peer_names(self.sock)
        except (OSError, ValueError) as exc:
            if not self.closing:
                server.stats.count("tls_handshake_failures")
                log.info("TLS handshake with %s failed: %s", self.peer, reason(exc))
            return False
        server.stats.count("tls_handshakes")
        return True

    def _reserve(self, size: int, deadline: float) -> bool:
        return self.server.budget.reserve(self, size, deadline)

    def _screen(self, head: bytes) -> bool:
        return self.server.admits(head, self.names)

    def _drop(self, size: int, message: str | None) -> bool:
        """Drains a frame whose length was just read, within its deadline
        and without keeping it, and answers it with ``message`` (None: as
        the server answers the call from its header); False if the
        connection is to be closed instead."""
        try:
            head = self.reader.discard(size, keep=512)
        except FrameTimeout as exc:
            self.server.stats.count("frame_timeouts")
            log.info("closing connection from %s: %s", self.peer, exc)
            return False
        except (PeerClosed, OSError):
            return False
        if message is None:
            reply, keep = self.server.handle(head, self.names, self.address)
        else:
            reply, keep = self.server.refusal_reply(head, message), True
        if reply is None or not keep:
            return False
        self.sock.settimeout(self.server.frame_timeout_s)
        self.sock.sendall(reply)
        return True

    # -- seen from other threads (accept loop, byte budget, shutdown) ----------------------
    def last_activity(self) -> float:
        return max(self.reader.last_progress, self._replied_at)

    def frame_started(self) -> float | None:
        return self.reader.frame_started

    def stalled(self, now: float, idle_ok: bool = False) -> bool:
        """In the middle of a frame with nothing received for STALL_S
        (or, with ``idle_ok``, between frames)."""
        if self.busy or self.closing:
            return False
        if self.reader.frame_started is None:
            return idle_ok
        return now - self.reader.last_progress >= STALL_S

    def shed(self) -> bool:
        """Closes the connection unless a call is being handled on it: with
        a reset, so that a peer still sending learns at once (after a
        plain shutdown Linux stops reading and the peer's send hangs
        until its own timeout)."""
        with self._lock:
            if self.busy or self.closing:
                return False
            self.closing = True
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
            self._shutdown()
        return True

    def wake_if_idle(self) -> None:
        """Shutdown: an idle connection's blocked recv returns at once."""
        with self._lock:
            if not self.busy and self.reader.between_frames:
                self.closing = True
                self._shutdown()

    def force_close(self) -> None:
        with self._lock:
            self.closing = True
            self._shutdown()

    def _shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            self.closing = True
            with contextlib.suppress(OSError):
                self.sock.close()

