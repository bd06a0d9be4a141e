"""Frames no client would send, built byte by byte: the shapes that made
thriftpy2 build an object per byte of the frame before any limit or role
was checked. Each fills ``size`` bytes (the frame without its length)."""

from __future__ import annotations

import json
import struct
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thriftpy2.thrift import TApplicationException

from pinlater.thrift.framing import EXCEPTION, decode_message
from pinlater.thrift.walk import check_message
from tests.thrift.rawwire import connect, length_prefix, read_reply

T_STOP, T_BOOL, T_I32, T_STRING, T_STRUCT, T_MAP, T_SET, T_LIST = 0, 2, 8, 11, 12, 13, 14, 15
EXTENSION = 99  # a field id no struct of the IDL has


def header(method: str, seqid: int = 1) -> bytes:
    name = method.encode()
    return struct.pack("!iI", -2147418111, len(name)) + name + struct.pack("!i", seqid)


def field(ftype: int, field_id: int) -> bytes:
    return struct.pack("!bh", ftype, field_id)


def list_head(etype: int, n: int) -> bytes:
    return struct.pack("!bi", etype, n)


def context() -> bytes:
    """Argument 1, a RequestContext with a source."""
    return field(T_STRUCT, 1) + field(T_STRING, 1) + struct.pack("!i", 7) + b"hostile" + b"\0"


def _empty_structs(method: str, path: tuple[int, ...], size: int) -> bytes:
    """``method``'s arguments with the list at ``path`` (field ids from the
    argument struct) holding as many empty structs as fill ``size``."""
    head = header(method) + context()
    for field_id in path[:-1]:
        head += field(T_STRUCT, field_id)
    head += field(T_LIST, path[-1])
    closing = len(path)  # a STOP per struct around the list (an empty struct is a STOP too)
    n = size - len(head) - 5 - closing
    return head + list_head(T_STRUCT, n) + b"\0" * n + b"\0" * closing


def _strings(method: str, path: tuple[int, ...], size: int) -> bytes:
    head = header(method) + context()
    for field_id in path[:-1]:
        head += field(T_STRUCT, field_id)
    head += field(T_LIST, path[-1])
    closing = len(path)
    n = (size - len(head) - 5 - closing) // 4
    return head + list_head(T_STRING, n) + b"\0\0\0\0" * n + b"\0" * closing


def _nested_in_extension(method: str, kind: int, size: int) -> bytes:
    """An unknown field of the request struct (id 99) holding a map, set
    or list of lists of empty structs, filling ``size``."""
    head = header(method) + context() + field(T_STRUCT, 2) + field(kind, EXTENSION)
    inner_n = 1000
    inner = list_head(T_STRUCT, inner_n) + b"\0" * inner_n
    if kind == T_MAP:  # map<i32, list<struct>>
        item = struct.pack("!i", 0) + inner
        outer = struct.pack("!bbi", T_I32, T_LIST, 0)
    else:
        item = inner
        outer = list_head(T_LIST, 0)
    count = (size - len(head) - len(outer) - 2) // len(item)
    outer = outer[:-4] + struct.pack("!i", count)
    body = head + outer + item * count + b"\0\0"
    return body


def _tree_in_extension(method: str, size: int) -> bytes:
    """An unknown field of the request struct holding lists of lists of
    lists of lists of empty structs, none of more than 64 items, as many
    as fit in ``size``: only the count of them all is over a bound."""
    head = header(method) + context() + field(T_STRUCT, 2) + field(T_LIST, EXTENSION)
    level = list_head(T_STRUCT, 64) + b"\0" * 64
    for _ in range(2):
        level = list_head(T_LIST, 64) + level * 64
    count = min(64, (size - len(head) - 5 - 2) // len(level))
    return head + list_head(T_LIST, count) + level * count + b"\0\0"


def _many_fields(method: str, size: int) -> bytes:
    """The request struct with one bool field of an unknown id repeated to
    fill ``size``: no container, only fields."""
    head = header(method) + context() + field(T_STRUCT, 2)
    one = field(T_BOOL, EXTENSION) + b"\1"
    count = (size - len(head) - 2) // len(one)
    return head + one * count + b"\0\0"


def _unknown_method(size: int) -> bytes:
    """An unknown method whose arguments are garbage (never read)."""
    head = header("launchRockets")
    return head + b"\xff" * (size - len(head))


@dataclass(frozen=True)
class Hostile:
    name: str
    method: str
    build: Callable[[int], bytes]
    # The reply: a PinLaterException code and words of its message, or
    # "UNKNOWN_METHOD" (a TApplicationException).
    code: int | str
    words: str

    def frame(self, size: int) -> bytes:
        """The framed message (with its length prefix)."""
        body = self.build(size)
        return length_prefix(len(body)) + body


ENQUEUE_REJECTED, UNKNOWN = 430, 500

SHAPES = [
    Hostile("enqueue: empty jobs", "enqueueJobs", lambda n: _empty_structs("enqueueJobs", (2, 2), n),
            ENQUEUE_REJECTED, "jobs in one call; the limit is"),
    Hostile("lookup: empty descriptors", "lookupJobs", lambda n: _strings("lookupJobs", (2, 1), n),
            UNKNOWN, "descriptors in one call; the limit is"),
    Hostile("ack: empty succeeded ACKs", "ackDequeuedJobs", lambda n: _empty_structs("ackDequeuedJobs", (2, 2), n),
            UNKNOWN, "ACKs in one call; the limit is"),
    Hostile("ack with result: empty failed ACKs", "ackDequeuedJobsWithResult",
            lambda n: _empty_structs("ackDequeuedJobsWithResult", (2, 3), n), UNKNOWN, "ACKs in one call"),
    Hostile("dequeue: empty ACKs riding along", "dequeueJobs",
            lambda n: _empty_structs("dequeueJobs", (2, 3, 2), n), UNKNOWN, "ACKs in one call"),
    Hostile("checkpoint: empty checkpoints", "checkpointJobs", lambda n: _empty_structs("checkpointJobs", (2, 2), n),
            UNKNOWN, "checkpoints in one call; the limit is"),
    Hostile("checkpoint with result: empty checkpoints", "checkpointJobsWithResult",
            lambda n: _empty_structs("checkpointJobsWithResult", (2, 2), n), UNKNOWN, "checkpoints in one call"),
    Hostile("queue config: retry delays", "createQueueWithConfig",
            lambda n: _i64s("createQueueWithConfig", (2, 6, 7), n), UNKNOWN, "retry delays"),
    Hostile("enqueue: a list of lists in an extension field", "enqueueJobs",
            lambda n: _nested_in_extension("enqueueJobs", T_LIST, n), ENQUEUE_REJECTED, "a container of"),
    Hostile("enqueue: a set of lists in an extension field", "enqueueJobs",
            lambda n: _nested_in_extension("enqueueJobs", T_SET, n), ENQUEUE_REJECTED, "a container of"),
    Hostile("lookup: a map of lists in an extension field", "lookupJobs",
            lambda n: _nested_in_extension("lookupJobs", T_MAP, n), UNKNOWN, "a container of"),
    Hostile("enqueue: small lists of small lists in an extension field", "enqueueJobs",
            lambda n: _tree_in_extension("enqueueJobs", n), ENQUEUE_REJECTED,
            "struct fields and container items in one message"),
    Hostile("scan: one field repeated", "scanJobs", lambda n: _many_fields("scanJobs", n),
            UNKNOWN, "struct fields and container items in one message"),
    Hostile("an unknown method", "launchRockets", _unknown_method, "UNKNOWN_METHOD", "launchRockets"),
]


def _i64s(method: str, path: tuple[int, ...], size: int) -> bytes:
    head = header(method) + context()
    for field_id in path[:-1]:
        head += field(T_STRUCT, field_id)
    head += field(T_LIST, path[-1])
    closing = len(path)
    n = (size - len(head) - 5 - closing) // 8
    return head + list_head(10, n) + b"\0" * (8 * n) + b"\0" * closing


def attack(port: int, seconds: float, size: int, names: list[str]) -> dict[str, int]:
    """One connection per shape named, each sending its frame of ``size``
    bytes and reading the answer, back to back for ``seconds``: how many
    were answered as expected, per shape. Raises on any other answer."""
    shapes = [s for s in SHAPES if s.name in names]
    if len(shapes) != len(names):
        raise ValueError(f"unknown shapes among {names}")
    answered = dict.fromkeys(names, 0)
    failures: list[str] = []
    deadline = time.monotonic() + seconds

    def run(shape: Hostile) -> None:
        frame = shape.frame(size)
        try:
            with connect(port, timeout_s=30) as sock:
                while time.monotonic() < deadline:
                    sock.sendall(frame)
                    reply = read_reply(sock, shape.method, timeout_s=30)
                    if not refused_as_expected(shape, reply):
                        failures.append(f"{shape.name}: {reply!r}")
                        return
                    answered[shape.name] += 1
        except Exception as exc:  # noqa: BLE001 -- reported below
            failures.append(f"{shape.name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(shape,)) for shape in shapes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise AssertionError("; ".join(failures))
    return answered


def handled(server: Any, frame: bytes) -> tuple[bytes | None, bool, int, float]:
    """A server's ``handle(frame)`` in this thread: its reply, whether the
    connection stays, and the peak of the memory and the CPU seconds that
    handling took."""
    tracemalloc.start()
    try:
        started = time.thread_time()
        reply, keep = server.handle(frame)
        cpu = time.thread_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return reply, keep, peak, cpu


def decoded_reply(structs: dict[str, tuple[Any, Any]], method: str, reply: bytes) -> Any:
    """A framed reply (with its length) to ``method``, decoded: the call's
    result struct (of the IDL's ``structs``), or a TApplicationException."""
    frame = reply[4:]
    if check_message(frame).mtype == EXCEPTION:
        return decode_message(frame, TApplicationException())
    return decode_message(frame, structs[method][1]())


def refused_as_expected(shape: Hostile, reply: Any) -> bool:
    """Whether ``reply`` (as ``rawwire.read_reply`` gives it) is the
    refusal ``shape`` expects."""
    if shape.code == "UNKNOWN_METHOD":
        return (isinstance(reply, tuple) and reply[1].type == TApplicationException.UNKNOWN_METHOD
                and shape.words in reply[1].message)
    error = getattr(reply, "e", None)
    return error is not None and error.errorCode == shape.code and shape.words in error.message


if __name__ == "__main__":
    # python -m tests.thrift.hostile_frames PORT SECONDS SIZE SHAPE...: an
    # attacking process of its own, so that its sending does not slow the
    # test process's normal client.
    port_arg, seconds_arg, size_arg, *shape_names = sys.argv[1:]
    print(json.dumps(attack(int(port_arg), float(seconds_arg), int(size_arg), shape_names)), flush=True)
