"""Signals handled through ``pinlater.kit.signals`` while the main thread
waits on the very event the handler sets: a handler calling ``Event.set``
itself deadlocks on the event's lock whenever a signal lands while the
waiting thread holds it (a child of ``pinlater server --processes`` once
never stopped on SIGTERM that way). With the handlers of the "direct"
mode, the test below failed about one run in two (hung, or dead of
handlers nested in the blocked ones)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

PROGRAM = textwrap.dedent("""
    import signal, sys, threading
    from pinlater.kit.signals import on_signals

    wake, stop = threading.Event(), threading.Event()
    heard = [0]

    def tick():
        heard[0] += 1
        wake.set()

    if sys.argv[1] == "direct":  # the way that deadlocks, for trying the test against
        signal.signal(signal.SIGUSR1, lambda *_: wake.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    else:
        on_signals({signal.SIGUSR1: tick, signal.SIGTERM: stop.set})
    print("ready", flush=True)
    while not stop.is_set():
        wake.wait(0.0002)  # holds the event's lock often
        wake.clear()
    print("stopped", heard[0], flush=True)
""")


def _run(mode: str, signals: int) -> tuple[int | None, str]:
    """Exit status (None: still running 10 s after SIGTERM) and output."""
    with subprocess.Popen([sys.executable, "-c", PROGRAM, mode], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        for _ in range(signals):
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.001)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None, ""
        return proc.returncode, proc.stdout.read()


def test_every_signal_is_heard_and_stop_stops() -> None:
    code, out = _run("relay", 2000)
    assert code == 0
    words = out.split()
    assert words[0] == "stopped" and int(words[1]) > 0

