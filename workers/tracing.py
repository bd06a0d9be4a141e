# mypy: disable-error-code="untyped-decorator"
"""Traces of PinLater tasks (``pinlater.observe.tracing``; nothing when it is off).

A publish is a producer span; its trace context and the time of the
publish go into the task message's headers, which PinLater stores with
the job, so the run continues the publisher's trace however late it
comes. A job with a raw body has no headers of its own: its run continues
the trace stored with the job (the span current when it was enqueued).

Each run of the job (every attempt, every retry) is a consumer span under
the publish span, with the job's descriptor and attempts and the time it
waited in its queue (``pinlater.queue_wait_ms``: from when the job became
runnable, its run_after, to the start of this run; from the later of its
publish and its ETA when the job does not say).

A publish from a run is the run's child, except a run's own task again (a
fan-out page chaining the next page): that publish hangs under the span
the chain started from, beside the pages before it, and links to the run
that made it. A long chain stays one flat trace, and each page still
names the page before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from celery.signals import task_postrun, task_prerun

from pinlater.observe import tracing

PUBLISHED_MS = "pinlater_published_ms"
# The trace context a chain of runs of one task started from.
CHAIN_ORIGIN = "pinlater_chain_origin"
_RUNS: dict[str, Any] = {}
_lock = threading.Lock()


class _Run(threading.local):
    """The run under way in this thread: its task and its chain's origin."""

    task: str | None = None
    origin: dict[str, str] | None = None


_run = _Run()


@contextmanager
def publishing(task_name: str, options: dict[str, Any]) -> Iterator[None]:
    """Around a publish of ``task_name``: its span, and the context put
    into ``options["headers"]``. Call only when ``tracing.ON``."""
    parent = links = None
    origin = _run.origin if _run.task == task_name else None
    if origin is not None:
        parent, links = origin, [tracing.context()]
    with tracing.span(f"publish {task_name}", {"celery.task": task_name}, kind="producer",
                      parent=parent, links=links or ()):
        headers = dict(options.get("headers") or {})
        headers.update(tracing.context())
        headers[PUBLISHED_MS] = int(time.time() * 1000)
        if origin is not None:
            headers[CHAIN_ORIGIN] = origin["traceparent"]
        options["headers"] = headers
        yield


def _eta_ms(eta: Any) -> int:
    if isinstance(eta, datetime):
        return int(eta.timestamp() * 1000)
    if isinstance(eta, str):
        try:
            return int(datetime.fromisoformat(eta).timestamp() * 1000)
        except ValueError:
            return 0
    return 0


@task_prerun.connect
def _start_run(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    if not tracing.ON or sender is None or task_id is None:
        return
    request = sender.request
    carrier = {key: value for key in tracing.CARRIER_KEYS if isinstance(value := getattr(request, key, None), str)}
    attributes: dict[str, Any] = {"celery.task": sender.name, "celery.task_id": task_id}
    info = getattr(request, "pinlater", None) or {}
    if info:
        attributes["pinlater.descriptor"] = info["descriptor"]
        attributes["pinlater.queue"] = info["descriptor"].split(":", 1)[0]
        attributes["pinlater.attempts_allowed"] = info["attempts_allowed"]
        attributes["pinlater.attempts_remaining"] = info["attempts_remaining"]
        # The claim has not spent this run's attempt yet: remaining counts it.
        attributes["pinlater.attempt"] = info["attempts_allowed"] - info["attempts_remaining"] + 1
    runnable = info.get("run_after_ms")
    published = getattr(request, PUBLISHED_MS, None)
    if not isinstance(runnable, int) and isinstance(published, int):
        runnable = max(published, _eta_ms(getattr(request, "eta", None)))
    if isinstance(runnable, int):
        attributes["pinlater.queue_wait_ms"] = max(0, int(time.time() * 1000) - runnable)
    handle = tracing.begin(f"run {sender.name}", attributes, kind="consumer", parent=carrier or None)
    # A chain starts at what its first run continued, or at that run.
    origin = getattr(request, CHAIN_ORIGIN, None)
    _run.task = sender.name
    _run.origin = {"traceparent": origin} if isinstance(origin, str) else (carrier or tracing.context())
    with _lock:
        _RUNS[task_id] = handle


@task_postrun.connect
def _end_run(task_id: str | None = None, state: str | None = None, **_: Any) -> None:
    if not tracing.ON or task_id is None:
        return
    _run.task = _run.origin = None
    with _lock:
        handle = _RUNS.pop(task_id, None)
    if handle is not None:
        tracing.finish(handle, None if state in (None, "SUCCESS") else f"task ended {state}")
