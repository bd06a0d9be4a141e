"""The walk of a message before thriftpy2 decodes it: its header, and its
struct within the bounds of its call.

The Cython decoder trusts its input: a container of an unknown element
type with a length of 2**31 makes it loop for minutes holding the GIL, and
its memory buffer reads past the end without an error. The walk rejects
unknown types, negative lengths and any length that cannot fit in the rest
of the frame.

Well formed is not enough: the decoder builds an object for every field
and item it knows (a list of empty structs costs ~150 bytes and ~2 µs per
byte of the frame) and loops over every one it skips. So the server walks
a call's frame within ``Bounds`` (``pinlater.thrift.bounds`` gives each
method's): the walk stops at the first list over its call's limit, and at
the first struct field or container item past the message's total, so
that walking and decoding a frame take a time bounded by the call's
limits, whatever the frame's size. A client reading replies walks them
unbounded (``check_message``).
"""

from __future__ import annotations

import struct
import sys
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
_I16 = struct.Struct("!h")


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
    check_body(frame, pos, UNBOUNDED)
    return header


@dataclass(frozen=True, slots=True)
class Items:
    """A list (or set) of ``etype`` that a call may hold more of than any
    other container: at most ``limit`` items, counted together with every
    other list of the same ``what`` in the message (an ACK's succeeded and
    failed lists share one limit; a field sent twice counts twice, since
    the decoder reads it twice)."""

    what: str
    limit: int
    etype: int


# The fields of a struct that may hold more than other fields: field id ->
# (wire type, the value's shape). A field sent with another type is skipped
# by the decoder, and walked like any other.
Shape = dict[int, tuple[int, "Shape | Items"]]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one message may hold, checked before it is decoded: the lists
    ``shape`` names (from the top struct down) within their limits, at
    most ``other_items`` items in any other container, and at most ``elements`` struct fields and container
    items in all. The decoder builds an object per field and item it knows
    and loops over those it skips: the elements bound its time, whatever
    the frame's size."""

    shape: Shape
    elements: int
    other_items: int


UNBOUNDED = Bounds({}, sys.maxsize, sys.maxsize)


class OverLimit(FrameError):
    """A well-formed message (as far as it was walked) that holds more than
    its Bounds allow: ``count`` of ``what`` where ``limit`` are allowed."""

    def __init__(self, what: str, count: int, limit: int, message: str) -> None:
        super().__init__(message)
        self.what = what
        self.count = count
        self.limit = limit


def check_body(frame: Frame, pos: int, bounds: Bounds) -> None:
    """Walks the message's struct from ``pos`` (after its header) within
    ``bounds``: raises OverLimit if it holds more than they allow, any
    other FrameError unless it is exactly one well-formed struct."""
    end = _Walk(frame, bounds).shaped(pos, bounds.shape, MAX_DEPTH)
    if end != len(frame):
        raise FrameError(f"{len(frame) - end} stray bytes after the message")


class _Walk:
    """One walk of a message, in time linear in its elements (struct fields
    and container items), which its bounds cap."""

    __slots__ = ("buf", "counts", "end", "left", "limit", "other")

    def __init__(self, buf: Frame, bounds: Bounds) -> None:
        self.buf = buf
        self.end = len(buf)
        self.limit = bounds.elements
        self.left = bounds.elements  # fields and items still allowed
        self.other = bounds.other_items
        self.counts: dict[str, int] = {}

    def _too_many(self) -> OverLimit:
        return OverLimit("fields and items", self.limit + 1, self.limit,
                         f"more than {self.limit} struct fields and container items in one message")

    def shaped(self, pos: int, shape: Shape, depth: int) -> int:
        """A struct, some of whose fields are ``shape``'s."""
        buf, end = self.buf, self.end
        if depth <= 0:
            raise FrameError("message nested too deeply")
        while True:
            if pos >= end:
                raise FrameError("truncated struct")
            ftype = buf[pos]
            if ftype == T_STOP:
                return pos + 1
            if pos + 3 > end:
                raise FrameError("truncated field header")
            self.left -= 1
            if self.left < 0:
                raise self._too_many()
            known = shape.get(_I16.unpack_from(buf, pos + 1)[0])
            pos += 3
            if known is None or known[0] != ftype:
                pos = self.skip(pos, ftype, depth - 1)
            elif isinstance(known[1], Items):
                if pos + 5 > end:
                    raise FrameError("truncated list header")
                etype, n = buf[pos], _I32.unpack_from(buf, pos + 1)[0]
                counted = known[1] if etype == known[1].etype else None
                pos = self.items(pos + 5, (etype,), n, depth - 1, counted)
            else:
                pos = self.shaped(pos, known[1], depth - 1)

    def skip(self, pos: int, ttype: int, depth: int) -> int:
        buf, end = self.buf, self.end
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
            return self.structs(pos, 1, depth)
        if ttype in (T_LIST, T_SET):
            if pos + 5 > end:
                raise FrameError("truncated list header")
            etype, n = buf[pos], _I32.unpack_from(buf, pos + 1)[0]
            return self.items(pos + 5, (etype,), n, depth, None)
        if ttype == T_MAP:
            if pos + 6 > end:
                raise FrameError("truncated map header")
            ktype, vtype, n = buf[pos], buf[pos + 1], _I32.unpack_from(buf, pos + 2)[0]
            return self.items(pos + 6, (ktype, vtype), n, depth, None)
        raise FrameError(f"unknown type {ttype}")

    def structs(self, pos: int, n: int, depth: int) -> int:
        """``n`` structs in a row: the hot loop (a batch of jobs is a list
        of structs), one call for the whole list. Scalars and strings
        inline, containers and structs by recursion; the fields are
        counted in a local, stored back around a recursion."""
        buf, end = self.buf, self.end
        if depth <= 0:
            raise FrameError("message nested too deeply")
        left = self.left
        for _ in range(n):
            while True:
                if pos >= end:
                    raise FrameError("truncated struct")
                ftype = buf[pos]
                if ftype == T_STOP:
                    pos += 1
                    break
                left -= 1
                if left < 0:
                    raise self._too_many()
                pos += 3
                width = _FIXED.get(ftype)
                if width is not None:
                    pos += width
                    if pos > end:
                        raise FrameError("truncated value")
                elif ftype == T_STRING:
                    if pos + 4 > end:
                        raise FrameError("truncated string length")
                    size: int = _I32.unpack_from(buf, pos)[0]
                    pos += 4
                    if size < 0 or size > end - pos:
                        raise FrameError(f"string length {size} does not fit the frame")
                    pos += size
                elif ftype in _MIN_SIZE:
                    self.left = left
                    pos = self.skip(pos, ftype, depth - 1)
                    left = self.left
                else:
                    raise FrameError(f"unknown field type {ftype}")
        self.left = left
        return pos

    def items(self, pos: int, types: tuple[int, ...], n: int, depth: int, counted: Items | None) -> int:
        """A container's ``n`` items: within ``counted``'s limit if given,
        else within the bound of other containers."""
        if n < 0:
            raise FrameError(f"negative container size {n}")
        if n == 0:
            return pos
        if any(t not in _MIN_SIZE for t in types):
            raise FrameError(f"unknown container element type {types}")
        if n * sum(_MIN_SIZE[t] for t in types) > self.end - pos:
            raise FrameError(f"container of {n} items does not fit the frame")
        if counted is None:
            if n > self.other:
                raise OverLimit("items", n, self.other, f"a container of {n} items, where containers other than "
                                f"the call's own lists hold at most {self.other}")
        else:
            count = self.counts.get(counted.what, 0) + n
            if count > counted.limit:
                raise OverLimit(counted.what, count, counted.limit,
                                f"{count} {counted.what} in one call; the limit is {counted.limit}")
            self.counts[counted.what] = count
        self.left -= n * len(types)
        if self.left < 0:
            raise self._too_many()
        widths = [_FIXED.get(t) for t in types]
        if all(w is not None for w in widths):
            return pos + n * sum(w for w in widths if w is not None)
        if types == (T_STRUCT,):
            return self.structs(pos, n, depth - 1)
        skip = self.skip
        for _ in range(n):
            for t in types:
                pos = skip(pos, t, depth - 1)
        return pos
