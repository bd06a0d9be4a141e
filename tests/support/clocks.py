"""Processes whose clocks disagree with the machine's, as hosts' clocks do
when NTP has a bad day: libfaketime (Debian's ``faketime``, which
``scripts/services`` installs) preloaded with a fixed offset.

The offset moves the wall clock (``time.time``, ``clock_gettime(REALTIME)``)
of the process and its children; the monotonic clock is left alone, so
timeouts and intervals are measured as before.
"""

from __future__ import annotations

import glob

# How far off the application's and the workers' clocks may be, either way:
# what the consistency model and the scale tests run with.
SKEW_MS = 1000

LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"


def library() -> str:
    """The multi-threaded libfaketime; a loud failure when it is missing."""
    found = sorted(glob.glob(LIBRARY_GLOB))
    if not found:
        raise RuntimeError(f"libfaketime is missing (no {LIBRARY_GLOB}): `scripts/services up` installs faketime")
    return found[0]


def skewed_env(skew_ms: int) -> dict[str, str]:
    """Environment for a child process whose wall clock is ``skew_ms`` off
    the machine's (ahead when positive)."""
    if not -86_400_000 <= skew_ms <= 86_400_000:
        raise ValueError(f"a skew of at most a day either way, got {skew_ms} ms")
    return {
        "LD_PRELOAD": library(),
        "FAKETIME": f"{skew_ms / 1000:+.3f}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # Read the offset once: nothing changes it while the process runs.
        "FAKETIME_NO_CACHE": "0",
    }
