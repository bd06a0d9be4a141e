"""Store-call metrics of a server of N processes (``pinlater server
--processes N``, the Contacts Service's) on the parent's ``/metrics``.

Each child counts its own store calls (``pinlater.observe.seam``) and writes them
about once a second, and when it stops, to a file of its own (named by its
pid) in a directory only the parent's user can read, which the parent made
and removes when it stops. The parent's ``/metrics`` sums the files. One
file per process rather than per slot: the counts of a child that exited
stay in the sums, so they never go down when a child is replaced; a child
killed outright loses at most its last second.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WRITE_EVERY_S = 1.0


def write(directory: str, snapshot: Any) -> None:
    """This process's counts, replacing the file it wrote before at once
    (a reader never sees half a file)."""
    path = Path(directory) / f"{os.getpid()}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(snapshot))
    os.replace(partial, path)


def keep_writing(directory: str, snapshot: Callable[[], Any], stop: threading.Event) -> threading.Thread:
    """A thread writing ``snapshot()`` every ``WRITE_EVERY_S`` until ``stop``
    is set, then once more."""

    def run() -> None:
        while not stop.wait(WRITE_EVERY_S):
            _write_logged(directory, snapshot)
        _write_logged(directory, snapshot)

    thread = threading.Thread(target=run, name="pinlater-store-metrics", daemon=True)
    thread.start()
    return thread


def _write_logged(directory: str, snapshot: Callable[[], Any]) -> None:
    try:
        write(directory, snapshot())
    except OSError as exc:  # the parent is stopping and removed the directory, or a full disk
        log.warning("could not write the store metrics for the parent's /metrics: %s", exc)


def read(directory: str) -> list[Any]:
    """Every process's last snapshot (JSON), for the parent to sum."""
    snapshots = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            snapshots.append(json.loads(path.read_text()))
        except (OSError, ValueError):  # gone meanwhile
            continue
    return snapshots
