"""An in-memory shard for application teams' unit tests.

It keeps the same contract as the server backends (one lock makes every
transition atomic), so code tested against it behaves the same on Redis or
MySQL. It is process-local: nothing is shared between processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pinlater.errors import QueueDeleted
from pinlater.states import JobState
from pinlater.stores.base import (
    CLAIM_OWNER_LEN,
    CUSTOM_STATUS_MAX,
    AckItem,
    Cancelled,
    CheckpointItem,
    Claims,
    EnqueueItem,
    Existing,
    ExpiredClaims,
    FailItem,
    JobRecord,
    ScanQuery,
    holds,
    new_claim_token,
    policy_delay,
)
from pinlater.stores.memory.lanes import Lanes
from pinlater.stores.memory.rows import Row, append_status, holds_unique, prepend_status


class MemoryBackend:
    def __init__(self, shard_id: str, clock: Callable[[], int] | None = None) -> None:
        self.shard_id = shard_id
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        # queue -> priority -> id -> row
        self._jobs: dict[str, dict[int, dict[int, Row]]] = {}
        self._next_id: dict[str, int] = {}
        self._deleted: set[str] = set()  # as Redis's pl:deleted
        # Per queue: unique key -> (priority, id) of the job that took it,
        # and back, so that a job leaving storage drops its key.
        self._unique: dict[str, dict[str, tuple[int, int]]] = {}
        self._unique_of: dict[str, dict[tuple[int, int], str]] = {}
        # (queue, priority) -> its lanes, while it keeps them (fair service)
        self._lanes: dict[tuple[str, int], Lanes] = {}

    # -- housekeeping ------------------------------------------------------
    def ping(self) -> None:
        return None

    probe = close = ping  # in memory: nothing to refuse a write, nothing to release

    def store_id(self) -> str:
        return f"memory-{id(self):x}"

    def now_ms(self) -> int:
        return self._clock()

    def create_queue(self, queue: str, priorities: int) -> None:
        with self._lock:
            table = self._jobs.setdefault(queue, {})
            for p in range(1, priorities + 1):
                table.setdefault(p, {})
            self._next_id.setdefault(queue, 0)
            self._deleted.discard(queue)

    def delete_queue(self, queue: str) -> None:
        with self._lock:
            self._deleted.add(queue)
            self._jobs.pop(queue, None)
            for at in [at for at in self._lanes if at[0] == queue]:
                del self._lanes[at]
            self._next_id.pop(queue, None)
            self._unique.pop(queue, None)
            self._unique_of.pop(queue, None)

    def queue_names(self) -> set[str]:
        return set(self.stored_queues())

    def stored_queues(self) -> dict[str, int]:
        with self._lock:
            return {queue: max(table, default=1) for queue, table in self._jobs.items()}

    def _table(self, queue: str, priority: int) -> dict[int, Row]:
        """The priority's jobs; if it has none, an empty dict that is not
        kept: as on Redis, only an enqueue gives a queue storage."""
        return self._jobs.get(queue, {}).get(priority, {})

    # -- transitions ---------------------------------------------------------
    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        with self._lock:
            if queue in self._deleted:
                raise QueueDeleted(queue, self.shard_id)
            now = self._clock()
            return [self._store(queue, item, now) for item in items]

    def _store(self, queue: str, item: EnqueueItem, now: int) -> int:
        self._next_id[queue] = self._next_id.get(queue, 0) + 1
        local_id = self._next_id[queue]
        row = Row(
            local_id=local_id,
            priority=item.priority,
            state=JobState.PENDING,
            body=item.body,
            attempts_allowed=item.attempts_allowed,
            attempts_remaining=item.attempts_allowed,
            custom_status=item.custom_status[:CUSTOM_STATUS_MAX],
            created_at=now,
            run_after=now if item.run_after_ms is None else item.run_after_ms,
            updated_at=now,
            claim=None,
            trace=item.trace,
            key=item.key,
        )
        self._jobs.setdefault(queue, {}).setdefault(item.priority, {})[local_id] = row
        self._pend(queue, row, now)
        return local_id

    def enqueue_unique(
        self, queue: str, items: Sequence[EnqueueItem], succeeded_ms: int, priorities: int
    ) -> list[int | Existing]:
        with self._lock:
            if queue in self._deleted:
                raise QueueDeleted(queue, self.shard_id)
            now = self._clock()
            held = self._unique.setdefault(queue, {})
            answers: list[int | Existing] = []
            for item in items:
                taken = held.get(item.unique) if item.unique else None
                if taken is not None:
                    row = self._table(queue, taken[0]).get(taken[1])
                    if row is not None and holds_unique(row, now, succeeded_ms):
                        answers.append(Existing(*taken))
                        continue
                local_id = self._store(queue, item, now)
                if item.unique:
                    held[item.unique] = (item.priority, local_id)
                    self._unique_of.setdefault(queue, {})[(item.priority, local_id)] = item.unique
                answers.append(local_id)
            return answers

    def _drop_unique(self, queue: str, priority: int, local_id: int) -> None:
        """Job ``local_id`` leaves storage: its unique key, if it still holds it, with it."""
        unique = self._unique_of.get(queue, {}).pop((priority, local_id), None)
        if unique is not None and self._unique[queue].get(unique) == (priority, local_id):
            del self._unique[queue][unique]

    def _pend(self, queue: str, row: Row, now: int) -> None:
        """``row`` has just become PENDING: a keyed job joins its lane (the
        first one starts the priority's lanes)."""
        if row.key:
            lanes = self._lanes.setdefault((queue, row.priority), Lanes())
            lanes.add(row.key, row.local_id, row.run_after, now)

    def _ready(self, queue: str, priority: int, limit: int, now: int) -> list[Row]:
        rows = [
            r
            for r in self._table(queue, priority).values()
            if r.state is JobState.PENDING and r.run_after <= now
        ]
        rows.sort(key=lambda r: (r.run_after, r.local_id))
        return rows[:limit]

    def _ready_in(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int], now: int
    ) -> tuple[list[Row], int | None]:
        """Up to ``limit`` runnable rows, priorities in order; then the first
        look-ahead priority with a runnable row (see Claims)."""
        if limit < 1:
            return [], None
        rows: list[Row] = []
        for priority in priorities:
            rows += self._ready(queue, priority, limit - len(rows), now)
            if len(rows) >= limit:
                return rows, None
        following = (p for p in look_ahead if self._ready(queue, p, 1, now))
        return rows, next(following, None)

    def dequeue(
        self,
        queue: str,
        priorities: Sequence[int],
        limit: int,
        source: str,
        look_ahead: Sequence[int] = (),
        token: str | None = None,
        allow: dict[str, int] | None = None,
        counted: bool = False,  # the running jobs are counted from the jobs themselves
    ) -> Claims:
        claim = f"{new_claim_token(token)}@{source}"
        with self._lock:
            now = self._clock()
            rows: list[Row] = []
            stopped: str | None = None
            for priority in priorities:
                if len(rows) >= limit:
                    break
                lanes = self._lanes.get((queue, priority))
                if lanes is None:
                    rows += self._ready(queue, priority, limit - len(rows), now)
                    continue
                stopped = self._take_by_lanes(lanes, self._table(queue, priority), limit - len(rows), now,
                                              rows, allow)
                if lanes.ended:
                    del self._lanes[(queue, priority)]
                if stopped is not None:
                    break
            following = None
            if len(rows) < limit and stopped is None:
                following = next((p for p in look_ahead if self._ready(queue, p, 1, now)), None)
            for row in rows:
                row.state = JobState.RUNNING
                row.claim = claim
                row.updated_at = now
            return Claims([row.claimed(claim) for row in rows], following, stopped)

    @staticmethod
    def _take_by_lanes(
        lanes: Lanes, table: dict[int, Row], want: int, now: int, rows: list[Row], allow: dict[str, int] | None,
    ) -> str | None:
        plain = sorted((r.run_after, r.local_id) for r in table.values()
                       if r.state is JobState.PENDING and not r.key)
        plain.reverse()  # the first one last, to pop
        taken: set[int] = set()

        def plain_head() -> tuple[int, int] | None:
            while plain and plain[-1][1] in taken:
                plain.pop()
            return plain[-1] if plain else None

        def claim(local_id: int) -> None:
            taken.add(local_id)
            rows.append(table[local_id])

        return lanes.take(want, now, plain_head, claim, allow)

    def lane_keys(self, queue: str, priorities: Sequence[int], limit: int) -> list[str]:
        with self._lock:
            now = self._clock()
            out: dict[str, None] = {}
            for priority in priorities:  # in order, until ``limit`` keys are found
                lanes = self._lanes.get((queue, priority))
                if lanes is not None and len(out) < limit:
                    out.update(dict.fromkeys(lanes.in_turn(limit - len(out), now)))
            return list(out)

    def peek(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()
    ) -> Claims:
        with self._lock:
            rows, following = self._ready_in(queue, priorities, limit, look_ahead, self._clock())
            return Claims([row.claimed("") for row in rows], following)

    def _claimed_by(self, queue: str, item: AckItem | FailItem | CheckpointItem) -> Row | None:
        row = self._table(queue, item.priority).get(item.local_id)
        if row is None or row.state is not JobState.RUNNING:
            return None
        return row if holds(row.claim, item.source, item.claim) else None

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        with self._lock:
            now = self._clock()
            results: list[bool] = []
            for item in items:
                row = self._claimed_by(queue, item)
                if row is not None:
                    row.state = JobState.SUCCEEDED
                    row.claim = None
                    row.updated_at = now
                    row.custom_status = append_status(row.custom_status, item.append_custom_status)
                results.append(row is not None)
            return results

    def _fail(self, queue: str, row: Row, now: int, delay_ms: int) -> bool:
        """Returns True if the job was re-pended, False if it failed for good."""
        row.claim = None
        row.updated_at = now
        if row.attempts_remaining > 1:
            row.attempts_remaining -= 1
            row.state = JobState.PENDING
            row.run_after = now + delay_ms
            self._pend(queue, row, now)
            return True
        row.attempts_remaining = 0
        row.state = JobState.FAILED
        return False

    def ack_failed(
        self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()
    ) -> list[bool]:
        with self._lock:
            now = self._clock()
            results: list[bool] = []
            for item in items:
                row = self._claimed_by(queue, item)
                if row is not None:
                    delay = item.delay_ms
                    if delay is None:
                        delay = policy_delay(delay_table, row.attempts_allowed, row.attempts_remaining)
                    row.custom_status = append_status(row.custom_status, item.append_custom_status)
                    self._fail(queue, row, now, delay)
                results.append(row is not None)
            return results

    def checkpoint(self, queue: str, items: Sequence[CheckpointItem]) -> list[bool]:
        with self._lock:
            now = self._clock()
            results: list[bool] = []
            for item in items:
                row = self._claimed_by(queue, item)
                if row is not None:
                    row.updated_at = now
                    if item.new_body is not None:
                        row.body = item.new_body
                    if item.attempts_allowed is not None:
                        row.attempts_allowed = item.attempts_allowed
                        row.attempts_remaining = item.attempts_allowed
                    row.custom_status = prepend_status(row.custom_status, item.prepend_custom_status)
                    if item.move_to_pending:
                        row.state = JobState.PENDING
                        row.claim = None
                        row.run_after = now if item.run_after_ms is None else item.run_after_ms
                        self._pend(queue, row, now)
                    elif item.run_after_ms is not None:
                        row.run_after = item.run_after_ms
                results.append(row is not None)
            return results

    def running_owners(self, queue: str, priority: int) -> dict[tuple[str, str], int]:
        with self._lock:
            counts: dict[tuple[str, str], int] = {}
            for r in self._table(queue, priority).values():
                if r.state is JobState.RUNNING and r.claim:
                    at = (r.claim[:CLAIM_OWNER_LEN], r.key)
                    counts[at] = counts.get(at, 0) + 1
            return counts

    def expire_claims(self, queue: str, priority: int, timeout_ms: int, limit: int) -> ExpiredClaims:
        with self._lock:
            now = self._clock()
            expired = [
                r
                for r in self._table(queue, priority).values()
                if r.state is JobState.RUNNING and r.updated_at <= now - timeout_ms
            ]
            expired.sort(key=lambda r: (r.updated_at, r.local_id))
            repended = failed = 0
            # Back to pending in id order, as every store puts jobs that come
            # back together in their lanes.
            for row in sorted(expired[:limit], key=lambda r: r.local_id):
                if self._fail(queue, row, now, 0):
                    repended += 1
                else:
                    failed += 1
            return ExpiredClaims(repended, failed)

    def gc(self, queue: str, priority: int, state: JobState, older_than_ms: int, limit: int) -> int:
        with self._lock:
            now = self._clock()
            table = self._table(queue, priority)
            old = sorted(
                (r for r in table.values() if r.state is state and r.updated_at <= now - older_than_ms),
                key=lambda r: (r.updated_at, r.local_id),
            )[:limit]
            for row in old:
                del table[row.local_id]
                self._drop_unique(queue, priority, row.local_id)
            return len(old)

    def release(self, queue: str, priority: int, local_ids: Sequence[int]) -> list[JobState | None]:
        with self._lock:
            now = self._clock()
            table = self._table(queue, priority)
            out: list[JobState | None] = []
            for local_id in local_ids:
                row = table.get(local_id)
                if row is not None and row.state is JobState.PENDING and not row.key and row.run_after > now:
                    row.run_after = now
                out.append(None if row is None else row.state)
            return out

    def retry_failed(
        self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int
    ) -> int:
        with self._lock:
            now = self._clock()
            failed = sorted(
                (r for r in self._table(queue, priority).values() if r.state is JobState.FAILED),
                key=lambda r: (-r.updated_at, -r.local_id),
            )[:limit]
            for row in sorted(failed, key=lambda r: r.local_id):  # in id order, as expire_claims
                row.state = JobState.PENDING
                row.attempts_allowed = row.attempts_remaining = attempts
                row.run_after = now if run_after_ms is None else run_after_ms
                row.updated_at = now
                self._pend(queue, row, now)
            return len(failed)

    def cancel(self, queue: str, priority: int, local_ids: Sequence[int], status: str) -> list[Cancelled]:
        with self._lock:
            now = self._clock()
            table = self._table(queue, priority)
            lanes = self._lanes.get((queue, priority))
            out: list[Cancelled] = []
            for local_id in local_ids:
                row = table.get(local_id)
                if row is None:
                    out.append(Cancelled(None))
                    continue
                before, claim = row.state, row.claim
                if before in (JobState.PENDING, JobState.RUNNING):
                    if before is JobState.PENDING and lanes is not None and row.key:
                        lanes.drop(row.key, local_id)
                    row.state, row.attempts_remaining, row.claim, row.updated_at = JobState.FAILED, 0, None, now
                    row.custom_status = append_status(row.custom_status, status)
                out.append(Cancelled(before, claim if before is JobState.RUNNING else None, row.key))
            return out

    def delete(
        self, queue: str, priority: int, state: JobState, local_ids: Sequence[int] | None, limit: int
    ) -> int:
        with self._lock:
            table = self._table(queue, priority)
            if local_ids is None:
                victims = [r.local_id for r in table.values() if r.state is state][:limit]
            else:
                victims = [i for i in local_ids if i in table and table[i].state is state]
            lanes = self._lanes.get((queue, priority)) if state is JobState.PENDING else None
            for local_id in victims:
                if lanes is not None and table[local_id].key:
                    lanes.drop(table[local_id].key, local_id)
                del table[local_id]
                self._drop_unique(queue, priority, local_id)
            return len(victims)

    # -- reads -----------------------------------------------------------------
    def _matching(self, queue: str, priority: int, state: JobState, future: bool) -> list[Row]:
        now = self._clock()
        rows = [r for r in self._table(queue, priority).values() if r.state is state]
        if state is JobState.PENDING:
            rows = [r for r in rows if (r.run_after > now) == future]
        return rows

    def count(self, queue: str, priority: int, state: JobState, future: bool) -> int:
        with self._lock:
            return len(self._matching(queue, priority, state, future))

    def scan(self, query: ScanQuery) -> list[JobRecord]:
        q = query
        with self._lock:
            rows = self._matching(q.queue, q.priority, q.state, q.future)
            keyed = sorted(((r.sort_time, r.local_id), r) for r in rows)
            keyed.reverse()
            before = q.before
            if before is not None:
                keyed = [(k, r) for k, r in keyed if k < before]
            page = [r for _, r in keyed[: q.limit]]
            max_body_bytes = q.max_body_bytes
            if not q.include_body or max_body_bytes is None:
                return [r.record(q.include_body) for r in page]
            records: list[JobRecord] = []
            size = 0
            for r in page:
                size += len(r.body)
                if size > max_body_bytes:
                    records.append(r.record(False))  # withheld: the page ends here
                    break
                records.append(r.record(True))
            return records

    def lookup(
        self,
        queue: str,
        priority: int,
        local_ids: Sequence[int],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord | None]:
        with self._lock:
            table = self._table(queue, priority)
            found = {i: table[i] for i in set(local_ids) if i in table}
            if include_body and max_body_bytes is not None:
                include_body = sum(len(r.body) for r in found.values()) <= max_body_bytes
            records = {i: r.record(include_body) for i, r in found.items()}
            return [records.get(i) for i in local_ids]

    def snapshot(self) -> dict[str, dict[int, list[JobRecord]]]:
        """Every job by queue and priority, for assertions in tests."""
        with self._lock:
            return {
                q: {p: [replace(r.record(True)) for r in t.values()] for p, t in prios.items()}
                for q, prios in self._jobs.items()
            }
