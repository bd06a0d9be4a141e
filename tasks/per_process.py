"""One object per process, made on first use and again after a fork: a
pool process must not share its parent's sockets (the task runtime)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._current: tuple[int, T] | None = None

    def get(self) -> T:
        with self._lock:
            if self._current is None or self._current[0] != os.getpid():
                self._current = (os.getpid(), self._make())
            return self._current[1]

    def discard(self) -> T | None:
        """Forgets this process's object, so the next ``get`` makes a new one,
        and returns it for the caller to close: None if there is none, or if
        it was made before a fork (its sockets are the parent's to close)."""
        with self._lock:
            current, self._current = self._current, None
        if current is None or current[0] != os.getpid():
            return None
        return current[1]

    @contextmanager
    def replaced(self, value: T) -> Iterator[T]:
        """``value`` is this process's object inside the block (a harness
        that runs tasks in its own process with stores it made); the one
        before comes back after it."""
        with self._lock:
            before, self._current = self._current, (os.getpid(), value)
        try:
            yield value
        finally:
            with self._lock:
                self._current = before
