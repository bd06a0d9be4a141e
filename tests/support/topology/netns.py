"""Entering a named network namespace from Python, one thread at a time.

``setns(CLONE_NEWNET)`` moves only the calling thread, and a socket keeps
the namespace it was made in: so a socket made by a short-lived thread
inside a host's namespace can be used from any thread of the tests, with no
process spawned per connection."""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextmanager
def entered(name: str) -> Iterator[None]:
    """The calling thread inside network namespace ``name`` for the block."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def call_in(name: str, fn: Callable[[], T], timeout_s: float = 10.0) -> T:
    """``fn()`` run by a fresh thread inside namespace ``name``: the caller's
    own thread never changes namespace, whatever ``fn`` raises."""
    result: list[T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            with entered(name):
                result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer from namespace {name} within {timeout_s:g}s")
    if failure:
        raise failure[0]
    return result[0]


def socket_in(name: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket of namespace ``name``."""
    return call_in(name, lambda: socket.socket(family, kind))
