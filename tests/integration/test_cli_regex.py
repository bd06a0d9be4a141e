"""The CLI's ``--regex`` (count, scan, delete) against real Redis: RE2
syntax, a hostile pattern answered promptly, and the budget's clear error."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_cli import pinlater

# Tens of seconds a test: started early, so no process is left with one at the end.
pytestmark = pytest.mark.slow


def test_cli_regex_is_re2_prompt_and_budgeted(servers: None, queue_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pinlater("create-queue", queue_name)
    for _ in range(8):
        pinlater("enqueue", queue_name, "a" * 25 + "!")
    started = time.monotonic()
    assert pinlater("count", queue_name, "pending", "--regex", "(a+)+$")["count"] == 0
    assert pinlater("scan", queue_name, "pending", "--regex", "(a+)+$")["jobs"] == []
    assert pinlater("delete", queue_name, "pending", "--regex", "(a+)+$")["deleted"] == 0
    elapsed = time.monotonic() - started
    # Python's re would take minutes here (about 2**25 steps a job, 8 jobs, 3
    # runs); three CLI start-ups take 2-5 s each on a busy 2-core machine.
    assert elapsed < 30, f"three CLI runs took {elapsed:.1f} s"

    error = pinlater("count", queue_name, "pending", "--regex", r"(a)\1", ok=False)
    assert r"'(a)\\1' (RE2 syntax): invalid escape sequence: \1" in error

    monkeypatch.setenv("PINLATER_REGEX_MAX_BODIES", "5")
    error = pinlater("delete", queue_name, "pending", "--regex", "^a", ok=False)
    assert "PINLATER_REGEX_MAX_BODIES" in error and "nothing was deleted" in error
    assert pinlater("count", queue_name, "pending")["count"] == 8
