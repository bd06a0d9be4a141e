"""Per-minute event counters (enqueued, dequeued, succeeded, ...) per queue in
the Redis and MySQL control stores, as mixins for their classes. They feed
the rates on the status dashboard and in /metrics.

Redis: one hash per minute, ``plc:counts:{minute}``, fields ``queue:event``,
expiring after ``RETENTION_MINUTES``. MySQL: table ``pinlater_event_counts``
(minute, queue, event) -> n; old minutes are purged now and then.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from pinlater.kit.sqlblocks import sql
from pinlater.storage.keys import counts_key

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis

    from pinlater.storage.mysql_pool import Session

T = TypeVar("T")

RETENTION_MINUTES = 180
PURGE_EVERY = 50  # on average one flush in this many purges old minutes
Counts = dict[int, dict[str, dict[str, int]]]


def _flatten(counts: Mapping[str, Mapping[str, int]]) -> list[tuple[str, str, int]]:
    return [(q, e, n) for q, events in counts.items() for e, n in events.items() if n]


class RedisCounterMixin:
    if TYPE_CHECKING:
        _r: redis.Redis[bytes]

        def _guard(self) -> AbstractContextManager[None]: ...

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        rows = _flatten(counts)
        if not rows:
            return
        with self._guard():
            pipe = self._r.pipeline(transaction=False)
            for queue, event, n in rows:
                pipe.hincrby(counts_key(minute), f"{queue}:{event}", n)
            pipe.expire(counts_key(minute), RETENTION_MINUTES * 60)
            pipe.execute()

    def read_counts(self, since_minute: int, until_minute: int) -> Counts:
        minutes = list(range(since_minute, until_minute + 1))
        with self._guard():
            pipe = self._r.pipeline(transaction=False)
            for minute in minutes:
                pipe.hgetall(counts_key(minute))
            replies: list[dict[bytes, bytes]] = pipe.execute()
        out: Counts = {}
        for minute, fields in zip(minutes, replies, strict=True):
            for field, value in fields.items():
                queue, _, event = field.decode().rpartition(":")
                out.setdefault(minute, {}).setdefault(queue, {})[event] = int(value)
        return out


class MySQLCounterMixin:
    if TYPE_CHECKING:

        def _run(self, work: Callable[[Session], T], transaction: bool = False) -> T: ...

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        rows = _flatten(counts)
        if not rows:
            return
        args: list[Any] = [v for q, e, n in rows for v in (minute, q, e, n)]

        def work(s: Session) -> None:
            s.execute(sql("ctl_add_counts", rows=len(rows)), args)
            if random.randrange(PURGE_EVERY) == 0:
                s.execute(sql("ctl_purge_counts"), {"before": minute - RETENTION_MINUTES})

        self._run(work)

    def read_counts(self, since_minute: int, until_minute: int) -> Counts:
        def work(s: Session) -> tuple[tuple[Any, ...], ...]:
            s.execute(sql("ctl_read_counts"), {"since": since_minute})
            return s.fetchall()

        out: Counts = {}
        for minute, queue, event, n in self._run(work):
            if int(minute) <= until_minute:
                out.setdefault(int(minute), {}).setdefault(str(queue), {})[str(event)] = int(n)
        return out
