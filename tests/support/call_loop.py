"""A well-behaved client calling a server in a loop, in a thread, while a
test's hostile load runs: every call's latency and every failure kept,
and ``check`` says the server kept serving it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Self


class CallLoop:
    """Calls ``call(i)`` for i = 1, 2, ... every ``pause_s`` until the
    ``with`` block ends; ``bound_s`` is the latency a served call stays under."""

    def __init__(self, call: Callable[[int], str], bound_s: float, pause_s: float = 0.05) -> None:
        self._call = call
        self.bound_s = bound_s
        self.pause_s = pause_s
        self.latencies: list[float] = []
        self.slowest = (0.0, "")
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.close()

    def close(self) -> None:
        """Closes what the calls kept open (a subclass's clients)."""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            t0 = time.monotonic()
            what = f"call {i}"
            try:
                what = f"call {i} ({self._call(i)})"
            except Exception as exc:  # noqa: BLE001 -- recorded, asserted on
                self.errors.append(f"call {i}: {type(exc).__name__}: {exc}")
            took = time.monotonic() - t0
            self.latencies.append(took)
            self.slowest = max(self.slowest, (took, what))
            self._stop.wait(self.pause_s)

    def check(self, min_calls: int) -> float:
        """The slowest call's seconds, once every call succeeded and at most
        one took ``bound_s`` or more (a busy CI machine's scheduling pause)."""
        assert not self.errors, f"{len(self.errors)} failed calls, first: {self.errors[:3]}"
        assert len(self.latencies) >= min_calls, f"only {len(self.latencies)} calls"
        # A server that stalls or starves new clients makes calls fail (the
        # client's timeout) or keeps them slow; one call of a busy CI
        # machine's scheduling pause past the bound is neither.
        slow = [t for t in self.latencies if t >= self.bound_s]
        assert len(slow) <= 1, f"{len(slow)} of {len(self.latencies)} calls took {self.bound_s}s or more"
        worst = max(self.latencies)
        assert worst < 2 * self.bound_s, f"a call took {worst:.2f}s: {self.slowest[1]}"
        return worst
