"""The walk of a message before thriftpy2 decodes it: its header and its
struct.

The Cython decoder trusts its input: a container of an unknown element
type with a length of 2**31 makes it loop for minutes holding the GIL, and
its memory buffer reads past the end without an error. The walk rejects
unknown types, negative lengths and any length that cannot fit in the rest
of the frame, in time linear in the frame's size, so that decoding a frame
that passed it is bounded by the frame's size as well.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pinlater.thrift.framing import Frame, FrameError

_VERSION_1 = 0x80010000
_VERSION_MASK = 0xFFFF0000

T_STOP, T_BOOL, T_BYTE, T_DOUBLE, T_I16, T_I32, T_I64 = 0, 2, 3, 4, 6, 8, 10
T_STRING, T_STRUCT, T_MAP, T_SET, T_LIST = 11, 12, 13, 14, 15
_FIXED = {T_BOOL: 1, T_BYTE: 1, T_DOUBLE: 8, T_I16: 2, T_I32: 4, T_I64: 8}
_MIN_SIZE = {**_FIXED, T_STRING: 4, T_STRUCT: 1, T_MAP: 6, T_SET: 5, T_LIST: 5}
MAX_DEPTH = 24
MAX_NAME = 128

_I32 = struct.Struct("!i")


@dataclass(frozen=True, slots=True)
class Header:
    name: str
    mtype: int
    seqid: int


def read_header(frame: Frame) -> tuple[Header, int]:
    """The message header and where the message's struct starts."""
    end = len(frame)
    if end < 4:
        raise FrameError("frame too short for a message header")
    first = _I32.unpack_from(frame, 0)[0]
    if first < 0:
        if (first & 0xFFFFFFFF) & _VERSION_MASK != _VERSION_1:
            raise FrameError("bad binary protocol version")
        mtype = first & 0xFF
        name, pos = _string(frame, 4)
    else:
        name, pos = _string(frame, 0)
        if pos >= end:
            raise FrameError("truncated message header")
        mtype = frame[pos]
        pos += 1
    if pos + 4 > end:
        raise FrameError("truncated message header")
    seqid = _I32.unpack_from(frame, pos)[0]
    return Header(name, mtype, seqid), pos + 4


def _string(frame: Frame, pos: int) -> tuple[str, int]:
    if pos + 4 > len(frame):
        raise FrameError("truncated message name")
    n = _I32.unpack_from(frame, pos)[0]
    pos += 4
    if n < 0 or n > MAX_NAME or pos + n > len(frame):
        raise FrameError(f"bad method name length {n}")
    try:
        return frame[pos : pos + n].decode("ascii"), pos + n
    except UnicodeDecodeError:
        raise FrameError("method name is not ASCII") from None


def check_message(frame: Frame) -> Header:
    """Walks the whole message; raises FrameError unless it is one
    well-formed header followed by exactly one struct."""
    header, pos = read_header(frame)
    end = _skip(frame, pos, T_STRUCT, MAX_DEPTH)
    if end != len(frame):
        raise FrameError(f"{len(frame) - end} stray bytes after the message")
    return header


def _skip(buf: Frame, pos: int, ttype: int, depth: int) -> int:
    end = len(buf)
    width = _FIXED.get(ttype)
    if width is not None:
        pos += width
        if pos > end:
            raise FrameError("truncated value")
        return pos
    if ttype == T_STRING:
        if pos + 4 > end:
            raise FrameError("truncated string length")
        n: int = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if n < 0 or n > end - pos:
            raise FrameError(f"string length {n} does not fit the frame")
        return pos + n
    if depth <= 0:
        raise FrameError("message nested too deeply")
    if ttype == T_STRUCT:
        # The hot loop (a batch of jobs is a list of structs): scalars and
        # strings inline, containers and structs by recursion.
        while True:
            if pos >= end:
                raise FrameError("truncated struct")
            ftype = buf[pos]
            if ftype == T_STOP:
                return pos + 1
            pos += 3
            width = _FIXED.get(ftype)
            if width is not None:
                pos += width
                if pos > end:
                    raise FrameError("truncated value")
            elif ftype == T_STRING:
                if pos + 4 > end:
                    raise FrameError("truncated string length")
                n = _I32.unpack_from(buf, pos)[0]
                pos += 4
                if n < 0 or n > end - pos:
                    raise FrameError(f"string length {n} does not fit the frame")
                pos += n
            elif ftype in _MIN_SIZE:
                pos = _skip(buf, pos, ftype, depth - 1)
            else:
                raise FrameError(f"unknown field type {ftype}")
    if ttype in (T_LIST, T_SET):
        if pos + 5 > end:
            raise FrameError("truncated list header")
        etype, n = buf[pos], _I32.unpack_from(buf, pos + 1)[0]
        return _skip_items(buf, pos + 5, (etype,), n, depth)
    if ttype == T_MAP:
        if pos + 6 > end:
            raise FrameError("truncated map header")
        ktype, vtype, n = buf[pos], buf[pos + 1], _I32.unpack_from(buf, pos + 2)[0]
        return _skip_items(buf, pos + 6, (ktype, vtype), n, depth)
    raise FrameError(f"unknown type {ttype}")


def _skip_items(buf: Frame, pos: int, types: tuple[int, ...], n: int, depth: int) -> int:
    if n < 0:
        raise FrameError(f"negative container size {n}")
    if n == 0:
        return pos
    if any(t not in _MIN_SIZE for t in types):
        raise FrameError(f"unknown container element type {types}")
    if n * sum(_MIN_SIZE[t] for t in types) > len(buf) - pos:
        raise FrameError(f"container of {n} items does not fit the frame")
    widths = [_FIXED.get(t) for t in types]
    if all(w is not None for w in widths):
        return pos + n * sum(w for w in widths if w is not None)
    for _ in range(n):
        for t in types:
            pos = _skip(buf, pos, t, depth - 1)
    return pos
