"""The tests' progress-aware wait: a slow backlog that keeps draining is
waited for past the stall window, a stuck one fails at it."""

from __future__ import annotations

import time

import pytest

from tests.support.waits import wait_progressing


def test_a_backlog_that_keeps_draining_is_waited_for_past_the_stall_window() -> None:
    start = time.monotonic()
    ticks = iter(range(1_000))
    # Done after 0.5 s; progress every poll; a stall of 0.2 s alone would have failed it.
    assert (
        wait_progressing(
            lambda: time.monotonic() - start > 0.5 and "done", lambda: next(ticks), stall=0.2, limit=5, interval=0.02
        )
        == "done"
    )


def test_a_stuck_backlog_fails_after_the_stall_window_naming_what() -> None:
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"without progress\) waiting for the queue"):
        wait_progressing(lambda: False, lambda: 7, stall=0.2, limit=5, interval=0.02, what="the queue")
    assert 0.2 <= time.monotonic() - start < 2


def test_progress_never_outlasts_the_limit() -> None:
    ticks = iter(range(1_000))
    start = time.monotonic()
    with pytest.raises(AssertionError, match="timed out after"):
        wait_progressing(lambda: False, lambda: next(ticks), stall=0.2, limit=0.5, interval=0.02)
    assert 0.5 <= time.monotonic() - start < 2
