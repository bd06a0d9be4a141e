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
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(interval_s)
    return result
