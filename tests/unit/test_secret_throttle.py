"""The admin-secret throttle on a clock of its own: per caller, per process,
the window, what a refusal costs, and its one log line a second."""

from __future__ import annotations

import logging

import pytest

from pinlater.errors import PasswordInvalid
from pinlater.kit.secret_throttle import SecretThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(throttle: SecretThrottle, caller: str) -> str:
    with pytest.raises(PasswordInvalid) as caught:
        throttle.check(caller)
    return caught.value.message


def test_a_caller_is_refused_after_its_wrong_secrets_until_the_window_passes() -> None:
    clock = Clock()
    throttle = SecretThrottle(per_caller=3, per_process=10, window_s=60, clock=clock)
    for _ in range(3):
        throttle.check("10.0.0.1")
        throttle.failed("10.0.0.1")
        clock.now += 1
    assert refused(throttle, "10.0.0.1") == (
        "too many wrong admin secrets from '10.0.0.1': refused without checking, for 57 s more")
    throttle.check("10.0.0.2")  # another caller is not held back by this one
    clock.now += 56.5
    assert "for 1 s more" in refused(throttle, "10.0.0.1")
    clock.now += 0.5  # the first wrong secret leaves the window: one more try
    throttle.check("10.0.0.1")
    throttle.failed("10.0.0.1")
    assert "for 1 s more" in refused(throttle, "10.0.0.1")


def test_a_right_secret_clears_its_callers_count() -> None:
    clock = Clock()
    throttle = SecretThrottle(per_caller=3, per_process=10, window_s=60, clock=clock)
    for _ in range(2):
        throttle.failed("deploy")
    throttle.succeeded("deploy")
    for _ in range(2):
        throttle.check("deploy")
        throttle.failed("deploy")
    throttle.check("deploy")


def test_every_caller_is_refused_once_the_process_has_seen_too_many() -> None:
    clock = Clock()
    throttle = SecretThrottle(per_caller=3, per_process=5, window_s=60, clock=clock)
    for n in range(5):  # one each from many addresses: none reaches its own limit
        throttle.check(f"10.0.1.{n}")
        throttle.failed(f"10.0.1.{n}")
    assert refused(throttle, "10.0.1.99") == (
        "too many wrong admin secrets on this server: refused without checking, for 60 s more")
    assert "on this server" in refused(throttle, "deploy")
    clock.now += 60
    throttle.check("deploy")


def test_the_callers_it_remembers_are_bounded_by_the_process_limit() -> None:
    clock = Clock()
    throttle = SecretThrottle(per_caller=2, per_process=4, window_s=10, clock=clock)
    for n in range(10_000):
        caller = f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        try:
            throttle.check(caller)
        except PasswordInvalid:
            clock.now += 10
            continue
        throttle.failed(caller)
    assert throttle.callers_counted <= 2 * 4 + 1


def test_it_logs_at_most_one_line_a_second(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttle = SecretThrottle(per_caller=3, per_process=1000, window_s=60, clock=clock)
    caplog.set_level(logging.WARNING, logger="pinlater.kit.secret_throttle")
    for n in range(200):  # two seconds of a guesser in a loop
        caller = f"10.0.2.{n % 50}"
        try:
            throttle.check(caller)
            throttle.failed(caller)
        except PasswordInvalid:
            pass
        clock.now += 0.01
    lines = [r.getMessage() for r in caplog.records]
    assert 1 <= len(lines) <= 2, lines
    assert all("\n" not in line for line in lines)
    assert "more attempts since the last line" in lines[-1], lines
