"""Framed transport and binary protocol, bounded for untrusted peers.

Frames are read here, not by thriftpy2's framed transport: the length prefix
is checked against a maximum before anything is allocated, and a frame's
bytes are gathered as they arrive (a 2 GB prefix followed by 10 bytes costs
10 bytes).

Every frame is then *walked* (``pinlater.thrift.walk``) before thriftpy2's
decoder sees it.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Callable
from typing import Any, TypeVar

from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
from thriftpy2.transport.framed import TCyFramedTransport  # type: ignore[attr-defined]
from thriftpy2.transport.memory import TCyMemoryBuffer  # type: ignore[attr-defined]

CALL, REPLY, EXCEPTION, ONEWAY = 1, 2, 3, 4

_I32 = struct.Struct("!i")
_RECV_CHUNK = 1 << 20
# A frame's bytes: bytes, or the bytearray a large frame was read into.
Frame = bytes | bytearray

# Frames up to this size need no reservation: they fit in the connection's
# receive buffer, which never holds more.
SMALL_FRAME = 64 * 1024


class FrameError(Exception):
    """The peer sent something that is not a well-formed framed binary message."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes is over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class PeerClosed(Exception):
    """The peer closed the connection (cleanly between frames, or mid-frame)."""


# -- reading frames ----------------------------------------------------------------
class FrameTimeout(TimeoutError):
    """A frame did not arrive whole within the frame timeout (counted from
    its first byte, however the bytes trickle in)."""


class FrameRejected(FrameError):
    """A frame the reader's ``reserve`` refused: no room to buffer it now."""

    def __init__(self, size: int) -> None:
        super().__init__(f"no room to buffer a frame of {size} bytes now")
        self.size = size


class FrameScreened(FrameError):
    """A large frame the reader's ``screen`` refused from its header: it is
    not to be buffered (its length was read, its bytes were not)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a frame of {size} bytes refused from its header")
        self.size = size


# A reader is given (size, deadline) and says whether a frame of ``size``
# bytes may be buffered; it may wait until ``deadline`` (time.monotonic()).
Reserve = Callable[[int, float], bool]
# Given a large frame's first bytes (its message header at least), says
# whether the frame deserves buffering at all.
Screen = Callable[[bytes], bool]
# The most bytes a message header takes: version, name (at most 128
# bytes, as ``pinlater.thrift.walk`` reads it), seqid.
HEADER_MAX = 4 + 4 + 128 + 4


def set_timeout(sock: socket.socket, timeout_s: float | None) -> None:
    """``sock.settimeout`` unless it is already so: each one is a system call."""
    if sock.gettimeout() != timeout_s:
        sock.settimeout(timeout_s)


class FrameReader:
    """Reads length-prefixed frames from a socket, with one ``recv`` per
    frame in the common case.

    A frame must arrive whole within ``frame_timeout_s`` of its first byte:
    each ``recv`` waits only for the time left. Frames up to ``SMALL_FRAME``
    bytes are gathered in the connection's receive buffer (at most 64 KiB);
    a larger one is first granted by ``reserve`` (the server's budget of
    bytes buffered across connections), then read into a buffer of its
    declared size."""

    def __init__(
        self, sock: socket.socket, max_frame: int, reserve: Reserve | None = None, screen: Screen | None = None
    ) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self.reserve = reserve
        self.screen = screen
        self._buf = bytearray()
        self._deadline = math.inf
        self._timeout_s: float | None = None
        # When the current frame's first byte arrived (None between frames),
        # and when it last progressed: bytes arrived, or its reservation was
        # granted (time spent waiting for one is the server's, not the peer's).
        self.frame_started: float | None = None
        self.last_progress = time.monotonic()

    @property
    def between_frames(self) -> bool:
        """Nothing of a next frame has arrived yet."""
        return self.frame_started is None

    def read_frame(
        self, *, frame_timeout_s: float | None, idle_timeout_s: float | None = None
    ) -> Frame | None:
        """The next frame's bytes (without the length). None when the peer
        closed between frames or sent nothing for ``idle_timeout_s``.
        Raises FrameError for a bad length (FrameTooLarge over the maximum,
        FrameScreened when ``screen`` refuses its header, FrameRejected when
        ``reserve`` refuses it), PeerClosed for a frame
        cut short, FrameTimeout for one not whole within ``frame_timeout_s``
        of its first byte."""
        if not self._buf:
            set_timeout(self.sock, idle_timeout_s)
            try:
                chunk = self.sock.recv(SMALL_FRAME)
            except TimeoutError:
                return None
            if not chunk:
                return None
            self._got(chunk)
        assert self.frame_started is not None
        self._timeout_s = frame_timeout_s
        self._deadline = math.inf if frame_timeout_s is None else self.frame_started + frame_timeout_s
        while len(self._buf) < 4:
            self._fill(4 - len(self._buf))
        size = _I32.unpack_from(self._buf, 0)[0]
        if size <= 0:
            raise FrameError(f"bad frame length {size} (is the peer using the framed transport?)")
        if size > self.max_frame:
            raise FrameTooLarge(size, self.max_frame)
        if size > SMALL_FRAME:
            if self.screen is not None:
                # Its header first: a call that will be refused from it
                # (an unknown method, one outside the caller's role) takes
                # no buffer and no share of the budget.
                want = 4 + min(size, HEADER_MAX)
                while len(self._buf) < want:
                    self._fill(want - len(self._buf))
                if not self.screen(bytes(self._buf[4:want])):
                    raise FrameScreened(size)
            if self.reserve is not None:
                if not self.reserve(size, self._deadline):
                    raise FrameRejected(size)
                self.last_progress = time.monotonic()
            return self._read_large(size)
        while len(self._buf) < 4 + size:
            self._fill(4 + size - len(self._buf))
        frame = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        self._frame_done()
        return frame

    def _read_large(self, size: int) -> bytearray:
        """A frame over SMALL_FRAME: the receive buffer holds only its
        beginning (it never holds more than SMALL_FRAME bytes)."""
        head = self._buf[4:]
        self._buf = bytearray()
        if self.reserve is not None:
            # Granted: its declared size, allocated once, filled in place.
            body = bytearray(size)
            have = len(head)
            body[:have] = head
            view = memoryview(body)
            while have < size:
                self.sock.settimeout(self._time_left())
                n = self._recv_into(view[have : have + min(size - have, _RECV_CHUNK)])
                have += n
            view.release()
        else:
            # Nothing granted (a client reading replies): memory grows with
            # the bytes that actually arrive, not with the declared size.
            body = head
            while len(body) < size:
                self.sock.settimeout(self._time_left())
                body += self._recv(min(size - len(body), _RECV_CHUNK))
        self._frame_done()
        return body

    def discard(self, size: int, keep: int) -> bytes:
        """Reads and drops a frame whose length was just read (its bytes
        never held at once), within the same deadline; returns its first
        ``keep`` bytes."""
        head = bytes(self._buf[4 : 4 + keep])
        remaining = 4 + size - len(self._buf)
        del self._buf[: 4 + size]
        scratch = memoryview(bytearray(SMALL_FRAME))
        while remaining > 0:
            self.sock.settimeout(self._time_left())
            n = self._recv_into(scratch[: min(remaining, SMALL_FRAME)])
            remaining -= n
            if len(head) < keep:
                head += bytes(scratch[: min(n, keep - len(head))])
        self._frame_done()
        return head

    def _time_left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise FrameTimeout(f"frame not complete within {self._timeout_s:g}s")
        return left

    def _fill(self, needed: int) -> None:
        self.sock.settimeout(self._time_left())
        self._got(self._recv(min(needed, SMALL_FRAME)))

    def _recv(self, n: int) -> bytes:
        try:
            chunk = self.sock.recv(n)
        except TimeoutError:
            raise FrameTimeout(f"frame not complete within {self._timeout_s:g}s") from None
        if not chunk:
            raise PeerClosed("connection closed in the middle of a frame")
        self.last_progress = time.monotonic()
        return chunk

    def _recv_into(self, view: memoryview) -> int:
        try:
            n = self.sock.recv_into(view)
        except TimeoutError:
            raise FrameTimeout(f"frame not complete within {self._timeout_s:g}s") from None
        if not n:
            raise PeerClosed("connection closed in the middle of a frame")
        self.last_progress = time.monotonic()
        return n

    def _got(self, chunk: bytes) -> None:
        self.last_progress = time.monotonic()
        if self.frame_started is None:
            self.frame_started = self.last_progress
        self._buf += chunk

    def _frame_done(self) -> None:
        # Bytes of a next frame already here (a pipelining peer) start its clock.
        self.frame_started = self.last_progress if self._buf else None


# -- encoding and decoding with thriftpy2 -----------------------------------------------------
class _OneFrame:
    """A read-only source holding one frame (length prefix included): the
    decoder can read nothing beyond it (reading past the end is EOF)."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._pos = 0

    def read(self, n: int) -> bytes:
        chunk = self._data[self._pos : self._pos + n].tobytes()
        self._pos += len(chunk)
        return chunk

    def is_open(self) -> bool:
        return True


S = TypeVar("S")


def decode_message(frame: Frame, obj: S) -> S:
    """Decodes the message's struct (after the walk: ``pinlater.thrift.walk``) into ``obj``."""
    proto = TCyBinaryProtocol(TCyFramedTransport(_OneFrame(_I32.pack(len(frame)) + frame)), strict_read=False)
    proto.read_message_begin()
    proto.read_struct(obj)
    return obj


def encode_message(name: str, mtype: int, seqid: int, obj: Any) -> bytes:
    """One framed message, ready to send."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(name, mtype, seqid)
    proto.write_struct(obj)
    body: bytes = buf.getvalue()
    return _I32.pack(len(body)) + body
