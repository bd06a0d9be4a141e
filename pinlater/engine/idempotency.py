"""Idempotent enqueue: the same idempotency key within a window returns the
first enqueue's descriptors instead of creating jobs again.

The key lives in the control store, shared by every process, under
``QUEUE/KEY``:

1. ``reserve_enqueue``: claim the key for ``RESERVATION_MS`` (set if
   absent). A new key, the usual case, costs this one call before the
   enqueue.
2. The key was there: ``recall_enqueue``. Descriptors of a finished
   enqueue with this key -> return them. Only a reservation (an enqueue
   with this key is running now, e.g. the first try of a call the client
   is retrying): wait for it to finish, up to ``WAIT_S``. Gone meanwhile
   (expired): try again.
3. Enqueue, then ``remember_enqueue`` the descriptors for the window. If the
   enqueue fails, ``forget_enqueue`` frees the key so a retry can run.

What this cannot cover: a process that dies between storing the jobs and
remembering their descriptors leaves only the reservation, and a retry
after the reservation expires enqueues again (jobs and keys live in
different stores, with no transaction over both). The same holds for an
enqueue whose shard went silent after it was sent (``EnqueueOutcomeUnknown``):
its reservation is kept, not freed, so a retry within ``RESERVATION_MS`` is
refused rather than run.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from pinlater.errors import EnqueueOutcomeUnknown, EnqueueRejected, InvalidRequest
from pinlater.limits import MAX_IDEMPOTENCY_KEY_LEN
from pinlater.stores.control import ControlStore

log = logging.getLogger(__name__)

DEFAULT_WINDOW_MS = 10 * 60 * 1000
RESERVATION_MS = 60_000
WAIT_S = 5.0


def store_key(queue: str, key: str) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY_LEN:
        raise InvalidRequest(f"idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters")
    return f"{queue}/{key}"


def enqueue_once(
    control: ControlStore,
    queue: str,
    key: str,
    window_ms: int,
    enqueue: Callable[[], list[str]],
) -> list[str]:
    skey = store_key(queue, key)
    deadline = time.monotonic() + WAIT_S
    delay = 0.01
    while True:
        if control.reserve_enqueue(skey, RESERVATION_MS):
            break
        recalled = control.recall_enqueue(skey)
        if recalled:
            log.debug("enqueue with key %r on %s answered from the first call", key, queue)
            return recalled
        if recalled is None and time.monotonic() < deadline:
            continue  # expired between the two calls: the key is free again
        if time.monotonic() >= deadline:
            raise EnqueueRejected(
                f"an enqueue with idempotency key {key!r} on {queue!r} is still running; retry later"
            )
        time.sleep(delay)
        delay = min(0.2, delay * 2)
    try:
        descriptors = enqueue()
    except EnqueueOutcomeUnknown:
        # The jobs may be stored: keep the reservation, so a retry with this
        # key is refused until it expires instead of storing them again.
        raise
    except BaseException:
        with contextlib.suppress(Exception):
            control.forget_enqueue(skey)
        raise
    try:
        control.remember_enqueue(skey, descriptors, window_ms)
    except Exception:
        # The jobs are stored: report them. A retry with this key within
        # RESERVATION_MS is refused, after it would enqueue again.
        log.exception("enqueued %d jobs on %s but could not remember idempotency key %r", len(descriptors), queue, key)
    return descriptors
