"""Signal handlers that cannot deadlock the process they stop.

A Python signal handler runs on the main thread between two of its
bytecodes, also while that thread is inside ``threading.Event.wait`` and
holds the event's own (non-reentrant) lock. A handler that calls
``Event.set`` then waits for a lock its own thread holds, forever: a
server told to stop by SIGTERM neither stops nor answers the next signal.

``on_signals`` installs handlers that only write the signal's number to a
pipe (no lock taken), and runs the callbacks on a thread of their own
that reads the pipe, where they may take any lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def on_signals(callbacks: Mapping[signal.Signals, Callable[[], None]]) -> None:
    """Run ``callbacks[sig]()`` on a relay thread each time ``sig`` arrives.
    Call from the main thread; call again to replace the set."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # a burst of signals drops bytes, never blocks the handler
    by_number = {int(sig): callback for sig, callback in callbacks.items()}

    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(BlockingIOError):
            os.write(write_fd, bytes([signum]))

    def relay() -> None:
        while True:
            for signum in os.read(read_fd, 64):
                try:
                    by_number[signum]()
                except Exception:  # the next signal must still be heard
                    log.exception("handling signal %d failed", signum)

    threading.Thread(target=relay, name="pinlater-signals", daemon=True).start()
    for sig in callbacks:
        signal.signal(sig, handler)
