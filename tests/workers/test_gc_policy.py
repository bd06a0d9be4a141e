"""Every worker process runs the collector as ``workers.gc_policy`` says,
whichever pool runs its tasks. Checked in a fresh interpreter: the policy
is process-wide, and this one's must stay as it is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, sys
from celery import signals
import workers.app
before = gc.get_threshold()
getattr(signals, sys.argv[1]).send(sender=None)
print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))
"""


@pytest.mark.parametrize("signal", ["worker_process_init", "worker_init"])
def test_a_worker_process_collects_fully_ten_times_rarer_and_freezes_what_it_started_with(signal: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, signal], capture_output=True, text=True, timeout=60, check=True)
    before, after, frozen = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [700, 10, 10]  # importing the app changes nothing by itself
    assert after == [700, 10, 100]
    assert frozen > 10_000  # Celery, Kombu and the project's modules, out of every collection
