"""tests.support.clocks: a child process's wall clock is off by the skew
asked for, its monotonic clock is the machine's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.clocks import skewed_env

READ = "import time; print(time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000)"


def clocks_of_child(env: dict[str, str]) -> tuple[int, int, int, int, int, int]:
    """(wall before, child's wall, wall after, monotonic before, child's, after), in ms."""
    wall, mono = time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000
    out = subprocess.run([sys.executable, "-c", READ], env=dict(os.environ, **env), capture_output=True,
                         text=True, timeout=30, check=True).stdout.split()
    return wall, int(out[0]), time.time_ns() // 1_000_000, mono, int(out[1]), time.monotonic_ns() // 1_000_000


@pytest.mark.parametrize("skew_ms", [1000, -1000, 250, -2500])
def test_the_childs_wall_clock_is_off_by_the_skew_and_its_monotonic_clock_is_not(skew_ms: int) -> None:
    before, child, after, mono_before, child_mono, mono_after = clocks_of_child(skewed_env(skew_ms))
    assert before + skew_ms <= child <= after + skew_ms
    assert mono_before <= child_mono <= mono_after


def test_a_skew_past_a_day_is_refused() -> None:
    with pytest.raises(ValueError, match="at most a day"):
        skewed_env(86_400_001)
