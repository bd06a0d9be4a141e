"""This process's id, read without a system call.

``os.getpid()`` is a system call on every read (CPython does not cache
it), and the worker's hot path read it several times per task to notice a
fork (claim source, client, heartbeat thread, transport sockets): ~8% of a
solo worker's main thread in a profile. The id is kept here and refreshed
in the child of every ``os.fork`` (billiard's and multiprocessing's too).
"""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def current_pid() -> int:
    return _pid
