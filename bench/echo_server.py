"""A framed PinLater "server" that does no work, for ``bench/server.py``.

It answers ``enqueueJobs`` and ``dequeueJobs`` with a canned reply (one
descriptor; one job; ACKs of it), from one thread with a selector, and
nothing else: no validation, no store. Clients driving it measure the
transport floor on this machine: what a call costs the ``ThriftClient``,
and the least a Python server on this transport spends per call, whatever
its design.

    python -m bench.echo_server     # prints "listening on HOST:PORT", serves until killed
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pinlater.thrift import idl, service
from pinlater.thrift.framing import REPLY, encode_message
from pinlater.thrift.walk import read_header

DESCRIPTOR = "bench_echo:s1:p1:1"
BODY = b'{"pin_id": 1234567890123, "board_id": 987654321, "action": "fanout"}'
_LENGTH = struct.Struct("!i")


def canned_results() -> dict[str, Any]:
    metadata = idl.PinLaterDequeueMetadata(attemptsAllowed=1, attemptsRemaining=1)
    return {
        "enqueueJobs": service.enqueueJobs_result(success=idl.PinLaterEnqueueResponse(jobDescriptors=[DESCRIPTOR])),
        "dequeueJobs": service.dequeueJobs_result(
            success=idl.PinLaterDequeueResponse(jobs={DESCRIPTOR: BODY}, jobMetadata={DESCRIPTOR: metadata})
        ),
        # The last ACK of bench/server.py's drain: every job has DESCRIPTOR.
        "ackDequeuedJobsWithResult": service.ackDequeuedJobsWithResult_result(
            success=idl.PinLaterAckResult(acked=[DESCRIPTOR])
        ),
    }


def serve(listener: socket.socket) -> None:
    results = canned_results()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytearray] = {}
    while True:
        for key, _ in selector.select():
            sock: socket.socket = key.fileobj  # type: ignore[assignment]
            if sock is listener:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffers[conn] = bytearray()
                selector.register(conn, selectors.EVENT_READ)
                continue
            chunk = sock.recv(65536)
            if not chunk:
                selector.unregister(sock)
                sock.close()
                del buffers[sock]
                continue
            buffer = buffers[sock]
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + _LENGTH.unpack_from(buffer)[0]:
                size = _LENGTH.unpack_from(buffer)[0]
                header, _ = read_header(bytes(buffer[4 : 4 + size]))
                del buffer[: 4 + size]
                sock.sendall(encode_message(header.name, REPLY, header.seqid, results[header.name]))


def main() -> int:
    listener = socket.create_server(("127.0.0.1", 0))
    host, port = listener.getsockname()[:2]
    print(f"listening on {host}:{port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        serve(listener)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
