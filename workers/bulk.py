# mypy: disable-error-code="no-untyped-call,misc"
# (Kombu ships without complete type hints; its calls are untyped.)
"""Bulk publishing: many tasks' jobs stored with a few enqueue calls of up
to ``MAX_JOBS`` jobs each, where one publish is one call.

Celery's ``group`` (and so ``chunks``, and a chord's header) publishes its
tasks one by one inside the app's ``producer_or_acquire``; an app made by
``workers.app.make_app`` opens a bulk scope there, and the group's tasks'
jobs wait in it until the group has published them all, then go out
together. Anything may open one:

    from workers.bulk import publishing
    with publishing():
        for user in users:
            sync.delay(user)

or, for one task, ``sync.delay_many([(user,) for user in users])``. Every
publish in an explicit scope waits; under a group's, only the group's own.

A scope's jobs are stored when the outermost scope on the thread ends,
before the ``with`` (or the group's ``apply_async``) returns, so what a
caller got back is stored as without bulk, or the error says it may not
be. Jobs go to each queue in publish order, one call per queue and batch
for up to ``MAX_JOBS``; a job with an idempotency key, and a batch's
callback, is a call of its own (the key and the batch are per call); a
call the job service refuses as too many for one goes again as halves. The
results' ``descriptor`` and ``duplicate`` are filled in then. If the block
raises, what it published before is stored all the same, as it would have
been one by one. An enqueue that fails raises from the scope's end:
the jobs of the calls before it are stored, the rest are not.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pinlater.errors import EnqueueRejected, QueueNotFound
from pinlater.models import Enqueued, Job
from workers.waker import WAKER

if TYPE_CHECKING:
    from workers.publishing import TaskPublishing

# Jobs a bulk enqueue call carries at most: the job service's default
# per-call limit (PINLATER_MAX_JOBS_PER_CALL); a lower one halves calls.
MAX_JOBS = 1000
_DUE_SLACK_MS = 50

log = logging.getLogger(__name__)
_local = threading.local()


@dataclass(eq=False)
class Pending:
    """A publish waiting in a bulk scope, and the results to stamp."""

    publisher: TaskPublishing
    queue: str
    job: Job
    idempotency_key: str | None
    batch: str | None
    results: list[Any] = field(default_factory=list)


@dataclass
class _Scope:
    depth: int = 0
    explicit: int = 0  # how many of the open scopes take every publish
    pending: list[Pending] = field(default_factory=list)
    # What the publishes of the scope decide alike, decided once (memo()).
    memo: dict[Any, Any] = field(default_factory=dict)


def _scope() -> _Scope:
    scope: _Scope | None = getattr(_local, "scope", None)
    if scope is None:
        scope = _local.scope = _Scope()
    return scope


@contextlib.contextmanager
def publishing(*, every: bool = True) -> Iterator[None]:
    """A bulk scope on this thread. ``every``: every publish waits in it;
    else only a group's tasks (the app's ``producer_or_acquire``)."""
    scope = _scope()
    scope.depth += 1
    scope.explicit += every
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        scope.depth -= 1
        scope.explicit -= every
        if scope.depth == 0:
            scope.memo.clear()
            if scope.pending:
                pending, scope.pending = scope.pending, []
                if not failed:
                    flush(pending)
                else:
                    _flush_beside(pending)


def _flush_beside(pending: list[Pending]) -> None:
    """What a block that raised had published goes out as its publishes
    would have; should that fail too, the block's own error is the one
    its caller sees (its ``except`` names it), and this one is logged."""
    try:
        flush(pending)
    except Exception as exc:  # noqa: BLE001 -- the block's error is raised; this one would hide it
        log.warning("%d job(s) published in a block that raised were not stored: %s", len(pending), exc)


def memo() -> dict[Any, Any] | None:
    """While a scope is open on this thread, a dict that lives as long as
    it: what its publishes decide alike (``direct_publish.usable``) is
    decided once; None outside scopes."""
    scope: _Scope | None = getattr(_local, "scope", None)
    return scope.memo if scope is not None and scope.depth else None


def takes(headers: dict[str, Any]) -> bool:
    """Whether a publish with these message headers waits in a scope: one
    is open, and takes every publish or this is a group's task."""
    scope: _Scope | None = getattr(_local, "scope", None)
    if scope is None or not scope.depth:
        return False
    return bool(scope.explicit) or headers.get("group") is not None


def hold(entry: Pending) -> None:
    """``entry`` waits in the open scope; the next result stamped is its."""
    _scope().pending.append(entry)
    _local.last = entry


def take_last() -> Pending | None:
    """The publish ``hold`` took last on this thread, once."""
    entry: Pending | None = getattr(_local, "last", None)
    _local.last = None
    return entry


def flush(pending: list[Pending]) -> None:
    """Stores the jobs: per publisher, queue and batch, in publish order,
    ``MAX_JOBS`` a call; each job with an idempotency key alone."""
    groups: dict[tuple[int, str, str | None], list[Pending]] = {}
    calls: list[list[Pending]] = []
    for entry in pending:
        if entry.idempotency_key is not None:
            calls.append([entry])
            continue
        group = groups.get((id(entry.publisher), entry.queue, entry.batch))
        if group is None or len(group) == MAX_JOBS:
            group = groups[(id(entry.publisher), entry.queue, entry.batch)] = []
            calls.append(group)
        group.append(entry)
    woken: set[tuple[int, str]] = set()
    for call in calls:
        first = call[0]
        publisher, queue = first.publisher, first.queue
        # Kombu's error translation, as a publish gets it (a connection error
        # is Kombu's OperationalError): guarded by tests/unit/test_third_party_guards.py.
        kombu_connection = publisher.connection.client
        translated = (contextlib.nullcontext() if kombu_connection is None
                      else kombu_connection._reraise_as_library_errors())
        with translated:
            stored = _enqueue(publisher, queue, call)
        now_ms = time.time() * 1000
        duplicates = set(stored.duplicates)
        due = False
        for index, (entry, descriptor) in enumerate(zip(call, stored, strict=True)):
            for result in entry.results:
                result.descriptor = str(descriptor)
                result.duplicate = index in duplicates
            run_after = entry.job.run_after_ms
            due = due or (index not in duplicates and (run_after is None or run_after <= now_ms + _DUE_SLACK_MS))
        if due and (id(publisher), queue) not in woken:
            woken.add((id(publisher), queue))
            WAKER.wake(publisher.connection.bus, publisher.connection.names.wake(queue))


def _enqueue(publisher: TaskPublishing, queue: str, call: list[Pending]) -> Enqueued:
    """The call's jobs stored; a call the job service refuses as too many
    for one (``PINLATER_MAX_JOBS_PER_CALL`` set below ``MAX_JOBS``) goes
    again as two halves. A refusal stores nothing, so nothing goes twice."""
    first = call[0]
    try:
        return _enqueue_once(publisher, queue, [entry.job for entry in call], first.idempotency_key, first.batch)
    except EnqueueRejected:
        if len(call) == 1:
            raise  # the job itself is refused
        half = len(call) // 2
        head, tail = _enqueue(publisher, queue, call[:half]), _enqueue(publisher, queue, call[half:])
        return Enqueued([*head, *tail], [*head.duplicates, *(half + i for i in tail.duplicates)])


def _enqueue_once(
    publisher: TaskPublishing, queue: str, jobs: list[Job], idempotency_key: str | None, batch: str | None,
) -> Enqueued:
    try:
        stored = publisher.client.enqueue(queue, jobs, idempotency_key=idempotency_key, batch=batch)
    except QueueNotFound:
        publisher.connection.ensure_queue(queue, again=True)
        stored = publisher.client.enqueue(queue, jobs, idempotency_key=idempotency_key, batch=batch)
    return stored if isinstance(stored, Enqueued) else Enqueued(stored)
