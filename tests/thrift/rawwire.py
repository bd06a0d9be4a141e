"""Raw wire helpers for tests that send what no client would."""

from __future__ import annotations

import socket
import struct
from typing import Any

from pinlater.thrift import idl, service
from pinlater.thrift.framing import CALL, FrameReader, decode_message, encode_message
from pinlater.thrift.walk import check_message


def connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def call_frame(method: str, seqid: int = 1, **args: Any) -> bytes:
    """A framed CALL message of ``method`` with the given argument values."""
    return encode_message(method, CALL, seqid, getattr(service, method + "_args")(**args))


def ctx(source: str = "fuzzer") -> Any:
    return idl.RequestContext(source=source)


def read_reply(sock: socket.socket, method: str | None = None, timeout_s: float = 5.0) -> Any:
    """The decoded reply: a result struct, ("exception", TApplicationException),
    or None if the server closed the connection. A hang fails (timeout)."""
    reader = FrameReader(sock, 64 * 1024 * 1024)
    try:
        frame = reader.read_frame(frame_timeout_s=timeout_s, idle_timeout_s=timeout_s)
    except (ConnectionResetError, BrokenPipeError):
        return None  # closed with our bytes unread: a reset
    if frame is None:
        # Either closed or silent: tell them apart.
        sock.settimeout(0.2)
        try:
            if sock.recv(1) == b"":
                return None
        except TimeoutError:
            pass
        except ConnectionResetError:
            return None
        raise AssertionError("no reply and the connection is still open: the server hangs")
    header = check_message(frame)
    if header.mtype == 3:
        from thriftpy2.thrift import TApplicationException

        return ("exception", decode_message(frame, TApplicationException()))
    name = method or header.name
    return decode_message(frame, getattr(service, name + "_result")())


def closed_by_server(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def length_prefix(n: int) -> bytes:
    return struct.pack("!I", n & 0xFFFFFFFF)
