"""The Contacts Service against frames that would cost far more decoded
than their bytes, as ``tests/thrift/test_hostile_decode.py`` tries the job
server: a list whose header claims two billion items, lists one item over
their call's limit, containers in a field no struct has, one field
repeated to fill the frame. Each is refused before anything is decoded,
with the ContactsException the IDL names (TOO_LARGE for a list over its
limit) or, for a list that cannot fit its frame, as a malformed message
(a TApplicationException), at a memory and CPU cost that does not grow with the frame; the
index is never asked, and the connection goes on."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from tasks.typeahead.service import MAX_FRAME_BYTES, MAX_OWNERS, MAX_PAGE_USERS, MAX_SOURCES, ContactsServer
from tasks.typeahead.wire import STRUCTS, ErrorCode
from tests.thrift.hostile_frames import (
    EXTENSION,
    T_BOOL,
    T_LIST,
    T_STRING,
    T_STRUCT,
    decoded_reply,
    field,
    handled,
    header,
    list_head,
)
from tests.thrift.rawwire import closed_by_server, connect, length_prefix
from tests.typeahead.support import OWNER, FakeIndex

T_I64 = 10
CLAIMED = 2**31 - 1  # items a list header says it holds
# What refusing a frame may cost, whatever its size (a decoded frame of the
# maximum size would take several times the frame).
PEAK_BYTES = 256 * 1024
CPU_S = 0.25


def _i64(value: int) -> bytes:
    return struct.pack("!q", value)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("!i", len(data)) + data


def _lookup(sources: bytes) -> bytes:
    """lookup(request) with an owner, a query and ``sources`` (field 4's list, head and items)."""
    return (header("lookup") + field(T_STRUCT, 1) + field(T_I64, 1) + _i64(OWNER) + field(T_STRING, 2)
            + _string("jo") + field(T_LIST, 4) + sources + b"\0" + b"\0")


def _owners(method: str, owners: bytes) -> bytes:
    """rebuild/rebuildSecond(cluster, owners) with ``owners`` (head and items)."""
    return header(method) + field(T_STRING, 1) + _string("primary") + field(T_LIST, 2) + owners + b"\0"


def _rename_page(users: bytes) -> bytes:
    """renamePage(cluster, page) whose page's users (field 5) are ``users``."""
    return (header("renamePage") + field(T_STRING, 1) + _string("primary") + field(T_STRUCT, 2)
            + field(T_I64, 1) + _i64(OWNER) + field(T_I64, 2) + _i64(1) + field(T_STRING, 3) + _string("followers")
            + field(T_LIST, 5) + users + b"\0" + b"\0")


def _fill(head: bytes, one: bytes, tail: bytes, size: int) -> bytes:
    return head + one * ((size - len(head) - len(tail)) // len(one)) + tail


@dataclass(frozen=True)
class Frame:
    name: str
    method: str
    build: Callable[[int], bytes]  # the message, about ``size`` bytes (or less, when the shape is small)
    # A ContactsException's code, or MALFORMED: a list that cannot fit the
    # frame is a malformed message (a TApplicationException PROTOCOL_ERROR).
    code: ErrorCode | str
    words: str


MALFORMED = "PROTOCOL_ERROR"


SHAPES = [
    Frame("lookup: sources claiming 2**31-1 strings", "lookup",
          lambda n: _lookup(list_head(T_STRING, CLAIMED)), MALFORMED, "container of 2147483647 items does not fit"),
    Frame("lookup: one source over the limit", "lookup",
          lambda n: _lookup(list_head(T_STRING, MAX_SOURCES + 1) + _string("following") * (MAX_SOURCES + 1)),
          ErrorCode.TOO_LARGE, "sources"),
    Frame("lookup: empty strings for sources, filling the frame", "lookup",
          lambda n: _lookup(list_head(T_STRING, (n - 64) // 4) + _string("") * ((n - 64) // 4)),
          ErrorCode.TOO_LARGE, "sources"),
    Frame("rebuild: owners claiming 2**31-1 ids", "rebuild",
          lambda n: _owners("rebuild", list_head(T_I64, CLAIMED)), MALFORMED, "does not fit the frame"),
    Frame("rebuild: one owner over the limit", "rebuild",
          lambda n: _owners("rebuild", list_head(T_I64, MAX_OWNERS + 1) + _i64(OWNER) * (MAX_OWNERS + 1)),
          ErrorCode.TOO_LARGE, "owners"),
    Frame("rebuildSecond: owners filling the frame", "rebuildSecond",
          lambda n: _owners("rebuildSecond", list_head(T_I64, (n - 64) // 8) + _i64(OWNER) * ((n - 64) // 8)),
          ErrorCode.TOO_LARGE, "owners"),
    Frame("renamePage: users claiming 2**31-1 ids", "renamePage",
          lambda n: _rename_page(list_head(T_I64, CLAIMED)), MALFORMED, "does not fit the frame"),
    Frame("renamePage: one user over the limit", "renamePage",
          lambda n: _rename_page(list_head(T_I64, MAX_PAGE_USERS + 1) + _i64(OWNER) * (MAX_PAGE_USERS + 1)),
          ErrorCode.TOO_LARGE, "users"),
    Frame("lookup: a list of lists in a field no struct has", "lookup",
          lambda n: _fill(header("lookup") + field(T_STRUCT, 1) + field(T_LIST, EXTENSION)
                          + list_head(T_LIST, (n - 64) // 5), list_head(T_BOOL, 0), b"\0\0", n),
          ErrorCode.TOO_LARGE, "a container of"),
    Frame("lookup: the owner repeated to fill the frame", "lookup",
          lambda n: _fill(header("lookup") + field(T_STRUCT, 1), field(T_I64, 1) + _i64(OWNER), b"\0\0", n),
          ErrorCode.TOO_LARGE, "struct fields and container items in one message"),
]


@pytest.fixture
def fake_index() -> FakeIndex:
    return FakeIndex()


@pytest.fixture
def server(fake_index: FakeIndex) -> Iterator[ContactsServer]:
    started = ContactsServer(fake_index.lookup, "127.0.0.1", 0).start()
    yield started
    started.stop(grace_s=2)


def _reply(method: str, reply: bytes) -> Any:
    return decoded_reply(STRUCTS, method, reply)


def _refused(shape: Frame, reply: bytes) -> None:
    answer = _reply(shape.method, reply)
    if shape.code == MALFORMED:
        assert isinstance(answer, TApplicationException), shape.name
        assert answer.type == TApplicationException.PROTOCOL_ERROR, answer.message
        assert shape.words in str(answer.message) and "\n" not in str(answer.message), answer.message
        return
    error = answer.e
    assert error is not None, shape.name
    assert (error.errorCode, shape.words in error.message) == (shape.code, True), (shape.name, error.message)
    assert "\n" not in error.message


def test_the_frames_fit_the_servers_limit() -> None:
    for shape in SHAPES:
        assert len(shape.build(MAX_FRAME_BYTES - 4)) <= MAX_FRAME_BYTES - 4, shape.name


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_hostile_frame_is_refused_undecoded_at_a_cost_its_size_does_not_set(
    server: ContactsServer, fake_index: FakeIndex, shape: Frame
) -> None:
    for size in (16 * 1024, MAX_FRAME_BYTES - 4):
        frame = shape.build(size)
        reply, keep, peak, cpu = handled(server, frame)
        # A malformed message is answered, then its connection closed.
        assert reply is not None and keep == (shape.code != MALFORMED), shape.name
        _refused(shape, reply)
        assert peak < PEAK_BYTES, f"{shape.name}: {peak} bytes for a frame of {len(frame)} bytes"
        assert cpu < CPU_S, f"{shape.name}: {cpu:.3f}s of CPU for a frame of {len(frame)} bytes"
    assert fake_index.calls == []


def test_over_the_wire_each_is_refused_and_lookups_go_on(server: ContactsServer) -> None:
    """The same frames sent on one connection, each followed by a lookup
    answered on it; after a malformed message the server closes the
    connection, and a new one is answered."""
    plain = (header("lookup") + field(T_STRUCT, 1) + field(T_I64, 1) + _i64(OWNER) + field(T_STRING, 2)
             + _string("john sm") + b"\0" + b"\0")
    sock = connect(server.port, timeout_s=10)
    try:
        for shape in SHAPES:
            _refused(shape, _exchange(sock, shape.build(MAX_FRAME_BYTES - 4)))
            if shape.code == MALFORMED:
                assert closed_by_server(sock), shape.name
                sock.close()
                sock = connect(server.port, timeout_s=10)
            assert _reply("lookup", _exchange(sock, plain)).success.matches, shape.name
    finally:
        sock.close()


def _exchange(sock: socket.socket, body: bytes) -> bytes:
    """Sends one framed message and reads the framed reply."""
    sock.sendall(length_prefix(len(body)) + body)
    size = struct.unpack("!i", _read(sock, 4))[0]
    return struct.pack("!i", size) + _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data
