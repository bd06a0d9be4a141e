"""Heartbeats of running PinLater tasks, from the process that runs them.

A claim lives as long as its holder checkpoints it within the queue's
claim timeout. The worker main process heartbeats the jobs it holds but
has not started; a started job is the task's: with ``auto_heartbeat`` (the
default) one thread per pool process checkpoints every job that has run
for more than a third of its claim timeout, and a task can also call
``self.heartbeat()`` itself. Short tasks cost nothing: the thread only
sends for jobs that have run long. A heartbeat that finds the job
cancelled (``cancel``) marks it, for ``PinLaterTask.raise_if_cancelled``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from pinlater.errors import PinLaterError
from pinlater.models import Checkpoint
from workers.pid import current_pid

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Running:
    queue: str
    descriptor: str
    source: str
    interval_s: float
    client: Any
    next_beat: float
    claim: str | None = None  # the run's claim (None: the source's, whichever)
    cancelled: bool = False  # a heartbeat found the job cancelled


# What a heartbeat found.
HELD, LOST, CANCELLED = "held", "lost", "cancelled"


def beat(client: Any, queue: str, descriptor: str, source: str, claim: str | None = None) -> str:
    """One checkpoint of the run's claim (else of ``source``'s): HELD;
    LOST when the claim is gone (timed out: the job may be running again
    already, elsewhere or in this very worker); CANCELLED when a cancel
    ended the job (it is FAILED already)."""
    result = client.checkpoint(queue, [Checkpoint(descriptor, claim=claim)], source=source)
    if descriptor in result.acked:
        return HELD
    return CANCELLED if descriptor in result.cancelled else LOST


class Heartbeats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._running: dict[int, Running] = {}
        self._thread: threading.Thread | None = None
        self._pid = 0
        # When the thread wakes up next by itself (monotonic; inf: never).
        self._wakes_at = math.inf

    def start(self, key: int, job: Running) -> None:
        with self._lock:
            self._running[key] = job
            if self._thread is None or self._pid != current_pid():
                # First job in this process (or first after a fork).
                self._pid = current_pid()
                self._wakes_at = math.inf
                self._thread = threading.Thread(target=self._run, name="pinlater-heartbeat", daemon=True)
                self._thread.start()
            if job.next_beat < self._wakes_at:
                # Only when this job is due before the thread's wake-up: a
                # short task then costs no thread switch at all.
                self._wakes_at = job.next_beat
                self._wake.notify()

    def stop(self, key: int) -> None:
        with self._lock:
            self._running.pop(key, None)

    def cancelled(self, key: int) -> bool:
        """Whether a heartbeat found the job run by ``key`` cancelled."""
        with self._lock:
            job = self._running.get(key)
            return job is not None and job.cancelled

    def _run(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [j for j in self._running.values() if j.next_beat <= now]
                for job in due:
                    job.next_beat = now + job.interval_s
                upcoming = [j.next_beat for j in self._running.values()]
                if not due:
                    self._wakes_at = min(upcoming) if upcoming else math.inf
                    self._wake.wait(timeout=(self._wakes_at - now) if upcoming else None)
                    continue
            for job in due:
                if job.cancelled:
                    continue
                try:
                    found = beat(job.client, job.queue, job.descriptor, job.source, job.claim)
                except (PinLaterError, OSError) as exc:
                    log.warning("heartbeat of %s failed: %s", job.descriptor, exc)
                    continue
                if found == CANCELLED:
                    log.info("job %s was cancelled while it ran", job.descriptor)
                    with self._lock:
                        job.cancelled = True
                elif found == LOST:
                    log.warning("job %s lost its claim (timed out); it may run again elsewhere", job.descriptor)


HEARTBEATS = Heartbeats()
