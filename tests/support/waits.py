"""Waiting in tests for something another thread or process brings about."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    check: Callable[[], Any], what: str = "condition", timeout_s: float = 10.0, interval_s: float = 0.05
) -> Any:
    """``check()`` once it is truthy, polled every ``interval_s``; fails
    naming ``what`` after ``timeout_s``."""
    return wait_until(check, timeout_s, interval_s, what)


def wait_until(check: Callable[[], Any], timeout: float, interval: float = 0.1,
               what: str | Callable[[], str] = "") -> Any:
    """``check()`` once it is truthy; ``what`` (or what it returns, read at
    the timeout, so it can show the state then) names it in the failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said or check}")
        time.sleep(interval)


def wait_progressing(check: Callable[[], Any], progress: Callable[[], int], stall: float, limit: float,
                     interval: float = 0.2, what: str | Callable[[], str] = "") -> Any:
    """``check()`` once it is truthy, on a machine that may be slow: fails
    once ``progress()`` (a count of work done) has not grown for ``stall``
    seconds, or after ``limit`` seconds in all. A backlog that keeps
    draining is waited for; a stuck one fails as soon as with a plain
    timeout."""
    start = time.monotonic()
    seen, since = progress(), start
    while True:
        value = check()
        if value:
            return value
        now = time.monotonic()
        done = progress()
        if done > seen:
            seen, since = done, now
        if now - since > stall or now - start > limit:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {now - start:.0f}s ({now - since:.0f}s without progress) "
                                 f"waiting for {said or check}")
        time.sleep(interval)
