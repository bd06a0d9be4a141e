"""The Redis shard backend: one Redis server/db is one shard.

Layout: see ``pinlater.stores.redis.keys``. Every transition is one Lua script
(``lua/*.lua``) taking "now" from the server's TIME, and every batch call
(enqueue, ACKs, checkpoints) is one EVALSHA, so one round trip per call.
A read is one command, or a script (atomic too) where it must keep only
part of each job it reads: its head without the body, or bodies within a
budget. The job records' format is in ``record``.

The client never retries a command on its own (``Retry(NoBackoff(), 0)``):
the transitions are not idempotent (a re-sent enqueue would store its jobs
twice, a re-sent ACK would report its own success as stale), so a lost
connection surfaces as ``ShardUnavailable`` and the caller decides.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from pinlater.errors import PinLaterError, QueueDeleted
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
    ShardOutcomeUnknown,
    ShardUnavailable,
    keep_claimed,
    new_claim_token,
)
from pinlater.stores.redis import keys, loader
from pinlater.stores.redis import record as redis_record
from pinlater.stores.redis.errors import redis_guard
from pinlater.stores.redis.layout import REDIS_SHARD, check_redis_layout
from pinlater.stores.redis.pool import open_redis
from pinlater.stores.redis.scripts import (
    KeyGroups,
    claims,
    dequeue_keys,
    json_arg,
    opt_arg,
    register_job_scripts,
    with_claim,
)

if TYPE_CHECKING:
    from redis.commands.core import Script

_T = TypeVar("_T")
ArgT = str | bytes | int

# Rounds of the dequeue script one dequeue may make when each meets
# LANE_WASTE lanes without a job (dequeue.lua): lanes left empty by a mass
# delete are cleared this many thousand a dequeue.
LANE_ROUNDS = 25

# Jobs deleted per delete_queue step: a few ms of server time per step.
DELETE_QUEUE_BATCH = 1000


def _pending_mode(state: JobState, future: bool) -> str:
    if state is not JobState.PENDING:
        return "all"
    return "future" if future else "due"


class RedisBackend:
    """ShardBackend over one Redis server/db."""

    def __init__(self, shard_id: str, client: redis.Redis[bytes]) -> None:
        self.shard_id = shard_id
        self._r = client
        self._scripts: dict[str, Script] = register_job_scripts(client)
        self._where = f"redis shard {shard_id}"
        self._errors = redis_guard(self._where, ShardUnavailable, ShardOutcomeUnknown)
        self._layout_checked = False

    @classmethod
    def from_url(cls, shard_id: str, url: str, socket_timeout_s: float = 5.0) -> RedisBackend:
        client = open_redis(url, socket_timeout_s)
        return cls(shard_id, client)

    # -- plumbing ------------------------------------------------------------

    def _guard(self) -> AbstractContextManager[None]:
        # The first command checks the layout; after a refusal every command
        # checks again, so a migration takes effect without a restart.
        if not self._layout_checked:
            check_redis_layout(self._r, REDIS_SHARD, self._where, ShardUnavailable)
            self._layout_checked = True
        return self._errors

    def _run(self, name: str, keys_: Sequence[str], args: Sequence[ArgT]) -> Any:
        with self._guard():
            return loader.call(self._r, self._scripts[name], keys_, args)

    def _call(self, fn: Callable[[], _T]) -> _T:
        with self._guard():
            return fn()

    # -- housekeeping ----------------------------------------------------------

    def ping(self) -> None:
        self._call(self._r.ping)

    def probe(self) -> None:
        # A write every probe: a server out of memory, a replica or one that
        # cannot save answers a PING but refuses this.
        self._call(lambda: self._r.set(keys.PROBE, b"1", px=keys.PROBE_TTL_MS))

    def store_id(self) -> str:
        def read() -> bytes:
            found = self._r.get(keys.STORE_ID)
            if found is None:  # a new store: the first to ask names it
                self._r.set(keys.STORE_ID, secrets.token_hex(8), nx=True)
                found = self._r.get(keys.STORE_ID)
            return found or b""

        return self._call(read).decode("ascii", "replace")

    def now_ms(self) -> int:
        sec, usec = self._call(self._r.time)
        return int(sec) * 1000 + int(usec) // 1000

    def close(self) -> None:
        self._r.close()
        self._r.connection_pool.disconnect()

    def create_queue(self, queue: str, priorities: int) -> None:
        self._run("create_queue", [keys.QUEUES, keys.prios_key(queue), keys.DELETED_QUEUES], [queue, priorities])

    def delete_queue(self, queue: str) -> None:
        # Bounded steps (see delete_queue.lua); each step re-reads the
        # priorities so one added meanwhile by an enqueue is not missed.
        while True:
            prios = sorted(int(p) for p in self._call(lambda: self._r.smembers(keys.prios_key(queue))))
            ks = [keys.QUEUES, keys.prios_key(queue), keys.ids_key(queue), keys.DELETED_QUEUES]
            for p in prios:
                ks += [keys.state_key(queue, p, s) for s in JobState]
                ks.append(keys.jobs_key(queue, p))
            args: list[ArgT] = [queue, DELETE_QUEUE_BATCH, *prios]
            if int(self._run("delete_queue", ks, args)) == 0:
                return

    def queue_names(self) -> set[str]:
        return {m.decode("utf-8") for m in self._call(lambda: self._r.smembers(keys.QUEUES))}

    def stored_queues(self) -> dict[str, int]:
        def read() -> dict[str, int]:
            names = sorted(m.decode("utf-8") for m in self._r.smembers(keys.QUEUES))
            pipe = self._r.pipeline(transaction=False)
            for name in names:
                pipe.smembers(keys.prios_key(name))
            return {name: max((int(p) for p in prios), default=1)
                    for name, prios in zip(names, pipe.execute(), strict=True)}

        return self._call(read)

    # -- transitions -------------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[EnqueueItem]) -> list[int]:
        if not items:
            return []
        return [int(i) for i in self._enqueue(queue, items, None)]

    def enqueue_unique(
        self, queue: str, items: Sequence[EnqueueItem], succeeded_ms: int, priorities: int
    ) -> list[int | Existing]:
        if not items:
            return []
        return [int(a) if not isinstance(a, list) else Existing(int(a[0]), int(a[1]))
                for a in self._enqueue(queue, items, succeeded_ms)]

    def _enqueue(self, queue: str, items: Sequence[EnqueueItem], succeeded_ms: int | None) -> list[Any]:
        """enqueue.lua's answer; with ``succeeded_ms``, items carry their unique keys."""
        groups = KeyGroups(lambda p: [keys.pending_key(queue, p), keys.jobs_key(queue, p)])
        # No stored status yet: the enqueued one counts as an append.
        if succeeded_ms is not None:
            meta = [
                [groups.of(it.priority), it.priority, it.run_after_ms, it.attempts_allowed,
                 it.custom_status[-CUSTOM_STATUS_MAX:], it.trace, it.key or None, it.unique or None, succeeded_ms]
                for it in items
            ]
        else:
            meta = [
                [groups.of(it.priority), it.priority, it.run_after_ms, it.attempts_allowed,
                 it.custom_status[-CUSTOM_STATUS_MAX:]]
                for it in items
            ]
            for row, it in zip(meta, items, strict=True):
                if it.key:
                    row += [it.trace, it.key]
                elif it.trace is not None:
                    row.append(it.trace)
        args: list[ArgT] = [queue, json_arg(meta), *(it.body for it in items)]
        ks = [keys.QUEUES, keys.ids_key(queue), keys.prios_key(queue), keys.DELETED_QUEUES, *groups.keys]
        answer = self._run("enqueue", ks, args)
        if answer is None:
            raise QueueDeleted(queue, self.shard_id)
        return list(answer)

    def dequeue(
        self,
        queue: str,
        priorities: Sequence[int],
        limit: int,
        source: str,
        look_ahead: Sequence[int] = (),
        token: str | None = None,
        allow: dict[str, int] | None = None,
        counted: bool = False,
    ) -> Claims:
        claim = f"{new_claim_token(token)}@{source}"
        return self._dequeue(queue, priorities, limit, claim, look_ahead, allow, counted)

    def peek(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()
    ) -> Claims:
        return self._dequeue(queue, priorities, limit, "", look_ahead)

    def _dequeue(
        self, queue: str, priorities: Sequence[int], limit: int, claim: str, look_ahead: Sequence[int],
        allow: dict[str, int] | None = None, counted: bool = False,
    ) -> Claims:
        """One script for every priority of the call (see dequeue.lua); an
        empty claim peeks."""
        if limit < 1 or not priorities:
            return Claims([])
        ks = dequeue_keys(queue, tuple(priorities), tuple(look_ahead))
        got = Claims([])
        # A call that met LANE_WASTE lanes without a job stops early (-1);
        # the rounds go on, each a script of its own, so that other clients
        # run between them.
        for _ in range(LANE_ROUNDS):
            args: list[ArgT] = [limit - len(got.jobs), claim, "1" if counted else "", len(priorities), *priorities,
                                *look_ahead]
            if allow is not None:
                args.append("allow")
                for key, n in allow.items():
                    args += [key, max(0, n)]
            try:
                reply = self._run("dequeue", ks, args)
            except PinLaterError as exc:
                keep_claimed(exc, got.jobs)
                raise
            part = claims(reply, claim)
            if allow is not None:
                for job in part.jobs:
                    if job.key in allow:
                        allow[job.key] -= 1
            got = Claims(got.jobs + part.jobs, part.next_priority, part.stopped_at)
            if int(reply[0]) != -1 or len(got.jobs) >= limit:
                break
        return got

    def lane_keys(self, queue: str, priorities: Sequence[int], limit: int) -> list[str]:
        if limit < 1 or not priorities:
            return []
        ks = [keys.pending_key(queue, p) for p in priorities]
        return [k.decode() for k in self._run("lane_keys", ks, [limit])]

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        if not items:
            return []
        groups = KeyGroups(
            lambda p: [
                keys.running_key(queue, p),
                keys.succeeded_key(queue, p),
                keys.jobs_key(queue, p),
            ]
        )
        # Only the newest CUSTOM_STATUS_MAX chars of an append can survive.
        meta = [
            with_claim([groups.of(it.priority), it.local_id, it.source, it.append_custom_status[-CUSTOM_STATUS_MAX:]],
                     it.claim)
            for it in items
        ]
        args: list[ArgT] = [CUSTOM_STATUS_MAX, json_arg(meta)]
        return [bool(x) for x in self._run("ack_succeeded", groups.keys, args)]

    def ack_failed(
        self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()
    ) -> list[bool]:
        if not items:
            return []
        if not delay_table and any(it.delay_ms is None for it in items):
            raise ValueError("a failure ACK without its own delay needs the policy's delay table")
        groups = KeyGroups(
            lambda p: [
                keys.running_key(queue, p),
                keys.pending_key(queue, p),
                keys.failed_key(queue, p),
                keys.jobs_key(queue, p),
            ]
        )
        meta = [
            with_claim(
                [
                    groups.of(it.priority),
                    it.local_id,
                    it.source,
                    it.append_custom_status[-CUSTOM_STATUS_MAX:],
                    None if it.delay_ms is None else max(0, int(it.delay_ms)),
                ],
                it.claim,
            )
            for it in items
        ]
        table = [int(d) for d in delay_table] or [0]
        args: list[ArgT] = [CUSTOM_STATUS_MAX, json_arg(meta), json_arg(table)]
        return [bool(x) for x in self._run("ack_failed", groups.keys, args)]

    def checkpoint(self, queue: str, items: Sequence[CheckpointItem]) -> list[bool]:
        if not items:
            return []
        groups = KeyGroups(
            lambda p: [
                keys.running_key(queue, p),
                keys.pending_key(queue, p),
                keys.jobs_key(queue, p),
            ]
        )
        bodies: list[bytes] = []
        meta: list[list[Any]] = []
        for it in items:
            if it.new_body is not None:
                bodies.append(it.new_body)
            meta.append(
                with_claim(
                    [
                        groups.of(it.priority),
                        it.local_id,
                        it.source,
                        0 if it.new_body is None else len(bodies),  # index into the bodies
                        it.move_to_pending,
                        it.run_after_ms,
                        it.attempts_allowed,
                        # Only the oldest CUSTOM_STATUS_MAX chars of a prepend survive.
                        (it.prepend_custom_status or "")[:CUSTOM_STATUS_MAX],
                    ],
                    it.claim,
                )
            )
        args: list[ArgT] = [CUSTOM_STATUS_MAX, json_arg(meta), *bodies]
        return [bool(x) for x in self._run("checkpoint", groups.keys, args)]

    def running_owners(self, queue: str, priority: int) -> dict[tuple[str, str], int]:
        ks = [keys.running_key(queue, priority), keys.jobs_key(queue, priority)]
        flat = self._run("running_owners", ks, [CLAIM_OWNER_LEN])
        return {(flat[i].decode(), flat[i + 1].decode()): int(flat[i + 2]) for i in range(0, len(flat), 3)}

    def expire_claims(self, queue: str, priority: int, timeout_ms: int, limit: int) -> ExpiredClaims:
        if limit < 1:
            return ExpiredClaims(0, 0)
        ks = [
            keys.running_key(queue, priority),
            keys.pending_key(queue, priority),
            keys.failed_key(queue, priority),
            keys.jobs_key(queue, priority),
        ]
        repended, failed = self._run("expire_claims", ks, [int(timeout_ms), limit])
        return ExpiredClaims(repended=int(repended), failed=int(failed))

    def gc(self, queue: str, priority: int, state: JobState, older_than_ms: int, limit: int) -> int:
        if not state.is_terminal:
            raise ValueError(f"gc applies to terminal states only, not {state.name}")
        if limit < 1:
            return 0
        ks = [keys.state_key(queue, priority, state), keys.jobs_key(queue, priority)]
        return int(self._run("gc", ks, [int(older_than_ms), limit]))

    def release(self, queue: str, priority: int, local_ids: Sequence[int]) -> list[JobState | None]:
        if not local_ids:
            return []
        ks = [keys.pending_key(queue, priority), keys.jobs_key(queue, priority)]
        states = self._run("release", ks, [keys.member(i) for i in local_ids])
        return [None if int(s) < 0 else JobState(int(s)) for s in states]

    def retry_failed(self, queue: str, priority: int, attempts: int, run_after_ms: int | None, limit: int) -> int:
        if limit < 1:
            return 0
        ks = [
            keys.failed_key(queue, priority),
            keys.pending_key(queue, priority),
            keys.jobs_key(queue, priority),
        ]
        return int(self._run("retry_failed", ks, [attempts, opt_arg(run_after_ms), limit]))

    def delete(
        self,
        queue: str,
        priority: int,
        state: JobState,
        local_ids: Sequence[int] | None,
        limit: int,
    ) -> int:
        ks = [keys.state_key(queue, priority, state), keys.jobs_key(queue, priority)]
        if local_ids is None:
            return int(self._run("delete", ks, ["limit", limit]))
        if not local_ids:
            return 0
        members: list[ArgT] = [keys.member(i) for i in local_ids if keys.can_exist(i)]
        if not members:
            return 0
        return int(self._run("delete", ks, ["ids", 0, *members]))

    def cancel(self, queue: str, priority: int, local_ids: Sequence[int], status: str) -> list[Cancelled]:
        asked = [i for i in local_ids if keys.can_exist(i)]
        replies: Iterator[Any] = iter(())
        if asked:
            ks = [keys.pending_key(queue, priority), keys.running_key(queue, priority),
                  keys.failed_key(queue, priority), keys.jobs_key(queue, priority)]
            args: list[ArgT] = [CUSTOM_STATUS_MAX, status[-CUSTOM_STATUS_MAX:], *(keys.member(i) for i in asked)]
            replies = iter(self._run("cancel", ks, args))
        return [_cancelled(next(replies)) if keys.can_exist(i) else Cancelled(None) for i in local_ids]

    # -- reads -------------------------------------------------------------------

    def count(self, queue: str, priority: int, state: JobState, future: bool) -> int:
        ks = [keys.state_key(queue, priority, state)]
        return int(self._run("count", ks, [_pending_mode(state, future)]))

    def scan(self, query: ScanQuery) -> list[JobRecord]:
        q = query
        if q.limit < 1:
            return []
        ks = [keys.state_key(q.queue, q.priority, q.state), keys.jobs_key(q.queue, q.priority)]
        cursor: list[ArgT] = ["", ""] if q.before is None else [q.before[0], q.before[1]]
        args: list[ArgT] = [_pending_mode(q.state, q.future), q.limit, "1" if q.include_body else "0"]
        rows = self._run("scan", ks, [*args, *cursor, opt_arg(q.max_body_bytes)])
        records = []
        for row in rows:
            # A third element: the job's body was withheld (over the budget).
            rec = redis_record.decode(keys.member_id(row[0]), q.priority, row[1], q.include_body and len(row) == 2)
            if rec is not None:
                records.append(rec)
        return records

    def lookup(
        self,
        queue: str,
        priority: int,
        local_ids: Sequence[int],
        include_body: bool,
        max_body_bytes: int | None = None,
    ) -> list[JobRecord | None]:
        if not local_ids:
            return []
        # An id asked twice is read and decoded once, and its record (and
        # body) shared. One command or script: atomic.
        wanted = sorted({i for i in local_ids if keys.can_exist(i)})
        if not wanted:
            return [None] * len(local_ids)
        jobs = keys.jobs_key(queue, priority)
        members = [keys.member(i) for i in wanted]
        keep = include_body
        if max_body_bytes is None:
            # Unbounded: one HMGET, the cheapest read, of whole jobs.
            values = self._call(lambda: self._r.hmget(jobs, members))
        else:
            # The script reads job by job, keeping the bodies within the bound.
            args: list[ArgT] = ["1" if include_body else "0", opt_arg(max_body_bytes), *members]
            withheld, *values = self._run("lookup", [jobs], args)
            keep = include_body and not withheld
        found = {i: redis_record.decode(i, priority, raw, keep) for i, raw in zip(wanted, values, strict=True)}
        return [found.get(i) for i in local_ids]


def _cancelled(reply: Sequence[Any]) -> Cancelled:
    """One job of cancel.lua's reply: {state before (-1: none), claim, key}."""
    state, claim, key = reply
    return Cancelled(None if int(state) < 0 else JobState(int(state)),
                     claim.decode() if claim else None, key.decode() if key else "")
