"""Jobs as threads that move one store call at a time.

A job of the consistency model runs in a thread of its own; before every
call it makes to a store (an HBase call, a MySQL statement, a publish to
the job service) it stops at a *point* and waits until the harness lets it
take one more step. Only one thread runs at a time, so an interleaving is
a list of steps: the model chooses them (Hypothesis draws and shrinks them),
and the same list replays the same interleaving.

Calls made outside a job thread (the application's actions, the harness's
own dequeues and ACKs, the oracle's reads) pass every point at once.

Each run may have a clock of its own (``skew_ms`` off the machine's, as a
worker on another host would): ``now_ms`` is the clock of the thread that
asks, which the harness puts in place of the tasks' own.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from tasks.appdata import store

STEP_TIMEOUT_S = 60.0


class Crash(BaseException):
    """The worker running a job died at this point. A BaseException: no
    ``except Exception`` in the code under test may swallow it."""


_local = threading.local()


def point(what: str) -> None:
    """A store call is about to happen: in a job thread, wait for a step."""
    run: Run | None = getattr(_local, "run", None)
    if run is not None:
        run.park(what)


def now_ms() -> int:
    """The clock of the calling thread: the machine's, off by its run's skew."""
    return store.now_ms() + getattr(_local, "skew_ms", 0)


def in_job() -> bool:
    return getattr(_local, "run", None) is not None


class Run:
    """One execution of a job's work in its own thread."""

    def __init__(self, name: str, work: Callable[[], Any], skew_ms: int = 0) -> None:
        self.name = name
        self._work = work
        self.skew_ms = skew_ms
        self._go = threading.Semaphore(0)
        self._parked = threading.Semaphore(0)
        self._kill = False
        self.state = "new"  # parked | done | crashed | failed
        self.at = ""  # the point it is parked at
        self.steps = 0
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"job:{name}", daemon=True)

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {self.state}, at={self.at!r})"

    @property
    def live(self) -> bool:
        return self.state in ("new", "parked")

    # -- in the job thread ---------------------------------------------------
    def _main(self) -> None:
        _local.run = self
        _local.skew_ms = self.skew_ms
        try:
            self.result = self._work()
            self.state = "done"
        except Crash:
            self.state = "crashed"
        except BaseException as exc:  # noqa: BLE001 (handed to the harness)
            self.error = exc
            self.state = "failed"
        finally:
            _local.run = None
            self._parked.release()

    def park(self, what: str) -> None:
        self.at = what
        self.state = "parked"
        self._parked.release()
        self._go.acquire()
        if self._kill:
            raise Crash(what)

    # -- in the harness's thread -----------------------------------------------
    def _wait(self) -> None:
        if not self._parked.acquire(timeout=STEP_TIMEOUT_S):
            frames = sys._current_frames().get(self._thread.ident or 0)
            where = "".join(traceback.format_stack(frames)) if frames is not None else "(thread gone)"
            raise AssertionError(f"{self.name}: no point reached within {STEP_TIMEOUT_S}s (after {self.at!r}); "
                                 f"a lock held across a store call? Its stack:\n{where}")

    def start(self) -> Run:
        """Runs up to its first point (or to its end)."""
        self._thread.start()
        self._wait()
        return self

    def step(self) -> None:
        """Makes the call it is parked at and runs to the next point."""
        if self.state != "parked":
            return
        self.steps += 1
        self._go.release()
        self._wait()

    def finish(self) -> None:
        while self.state == "parked":
            self.step()
        self._thread.join(STEP_TIMEOUT_S)

    def crash(self) -> None:
        """The worker dies before the call it is parked at."""
        if self.state != "parked":
            return
        self._kill = True
        self._go.release()
        self._wait()
        self._thread.join(STEP_TIMEOUT_S)
