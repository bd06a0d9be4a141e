"""The MySQL shard's claims: dequeue (one compound statement whatever the
number of priorities: a transaction of claiming UPDATE ... LIMITs, priority
by priority while jobs are missing, and a look ahead, committed before the
claimed jobs are read back by claim), peek, ACKs (one guarded single-table
UPDATE per table, whose row count says "all applied" or "all stale" and
which, for several items, leaves its own marker in the claim column, so
that only a mixed batch costs a second round trip), checkpoints (BEGIN, per
table a locking read of the RUNNING rows and one guarded UPDATE, COMMIT: a
heartbeat keeps the claim, so it cannot carry a marker) and expiring claims.
A part of ``MySQLBackend`` (``shard``).
"""


from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from pinlater.errors import PinLaterError, StorageError
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import (
    CLAIM_OWNER_LEN,
    CLAIM_TOKEN_LEN,
    AckItem,
    CheckpointItem,
    ClaimedJob,
    Claims,
    ExpiredClaims,
    FailItem,
    ShardOutcomeUnknown,
    holds,
    keep_claimed,
    new_claim_token,
)
from pinlater.stores.mysql.errors import LOCK_CONFLICT, MySQLStorageError, MySQLWriteRefused, error_code
from pinlater.stores.mysql.lanes import LanesMixin
from pinlater.stores.mysql.pool import Session
from pinlater.stores.mysql.statements import sql

CLAIM_MAX = 255  # the claim column's width


class _Targeted(Protocol):
    """What AckItem, FailItem and CheckpointItem share."""

    @property
    def priority(self) -> int: ...
    @property
    def local_id(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def claim(self) -> str | None: ...


_Item = TypeVar("_Item", bound=_Targeted)


def _rounds(items: Sequence[_Targeted]) -> list[dict[int, list[int]]]:
    """Item indexes split so that no round touches a job twice (round k holds
    every job's k-th occurrence), grouped by priority. A batch naming a job
    twice is thus applied in order, like a per-item loop would."""
    seen: dict[tuple[int, int], int] = {}
    rounds: list[dict[int, list[int]]] = []
    for index, item in enumerate(items):
        key = (item.priority, item.local_id)
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k == len(rounds):
            rounds.append({})
        rounds[k].setdefault(item.priority, []).append(index)
    return rounds


def _by_holder(items: Sequence[_Targeted], indexes: list[int]) -> list[tuple[bool, list[int]]]:
    """One table's items split into those that name their claim (True) and
    those that give only a source (False): an ACK statement compares one or
    the other (``{held}`` in the SQL file). Usually all are of one kind."""
    exact = [i for i in indexes if items[i].claim is not None]
    if len(exact) == len(indexes):
        return [(True, indexes)]
    if not exact:
        return [(False, indexes)]
    return [(True, exact), (False, [i for i in indexes if items[i].claim is None])]


def _holders(items: Sequence[_Targeted], indexes: list[int]) -> list[str]:
    """What each item's job's claim must hold to (see ``_by_holder``)."""
    return [items[i].claim or items[i].source for i in indexes]


@lru_cache(maxsize=1024)
def _dequeue_text(queue: str, priorities: tuple[int, ...], look_ahead: tuple[int, ...], traced: bool) -> str:
    """The one-round-trip dequeue: one compound statement (see dequeue_begin
    in the SQL file). Its arguments: ``_dequeue_args``."""
    tables = [(p, job_table(queue, p)) for p in priorities]
    inner = [sql("dequeue_declare", priority=p) for p in priorities]
    inner += [sql("dequeue_check", table=t, priority=p) for p, t in tables]
    inner.append(sql("dequeue_start"))
    inner += [sql("dequeue_claim", table=t, priority=p) for p, t in tables]
    if look_ahead:
        branches = _look_ahead(queue, look_ahead)
        inner.append(f"{sql('dequeue_if_missing')}\n{branches};\n{sql('dequeue_end_if')}")
    inner.append(sql("dequeue_commit"))
    inner += [sql("dequeue_read", table=t, priority=p, trace=traced) for p, t in tables]
    inner.append(sql("dequeue_fair"))
    statements = [sql("dequeue_begin"), *inner]
    return "".join(f"{stmt};\n" for stmt in statements) + sql("dequeue_end")


def _dequeue_args(
    queue: str, priorities: Sequence[int], limit: int, claim: str, look_ahead: Sequence[int]
) -> list[Any]:
    claims = [claim] * len(priorities)
    tables = [job_table(queue, p) for p in priorities]
    return [limit, *tables, *claims, *_look_ahead_args(look_ahead), *claims]


def _peek_script(
    queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int], traced: bool
) -> tuple[str, list[Any]]:
    statements = [sql("peek", table=job_table(queue, p), priority=p, trace=traced) for p in priorities]
    args: list[Any] = [limit] * (4 * len(priorities))
    if look_ahead:
        statements.append(_look_ahead(queue, look_ahead))
        args += _look_ahead_args(look_ahead)
    return ";\n".join(statements), args


def _look_ahead(queue: str, look_ahead: Sequence[int]) -> str:
    """The look_ahead statement (its arguments: ``_look_ahead_args``)."""
    branches = [sql("look_ahead", table=job_table(queue, p)) for p in look_ahead]
    return "\nUNION ALL\n".join(branches) + "\nORDER BY pos LIMIT 1"


def _look_ahead_args(look_ahead: Sequence[int]) -> list[int]:
    return [x for pos, priority in enumerate(look_ahead) for x in (pos, priority)]


# id, body, attempts allowed and remaining, priority, trace, run_after; a
# look-ahead row has 2, the priority to serve by lanes 1
_JOB_COLUMNS = 7


def _claims(results: list[tuple[tuple[Any, ...], ...]], limit: int, claim: str) -> Claims | _Stopped:
    """Decode the results of a dequeue or peek: result sets of jobs, in
    priority order, whose rows end with their priority, and (when looked
    ahead, and not every job was found) one of (pos, priority) naming the
    first runnable look-ahead priority; or, from a dequeue that stopped at a
    priority served by lanes, one of (priority,) (``Claims.by_lanes``)."""
    jobs: list[ClaimedJob] = []
    following: tuple[tuple[Any, ...], ...] = ()
    by_lanes = None
    for rows in results:
        if rows and len(rows[0]) == 1:
            by_lanes = int(rows[0][0])
            continue
        if rows and len(rows[0]) != _JOB_COLUMNS:
            following = rows
            continue
        jobs += [
            ClaimedJob(int(r[0]), int(r[4]), bytes(r[1]), int(r[2]), int(r[3]), claim, r[5], int(r[6])) for r in rows
        ]
    del jobs[limit:]  # a peek reads up to limit per priority
    if by_lanes is not None:
        return _Stopped(jobs, by_lanes)
    if len(jobs) >= limit or not following:
        return Claims(jobs)
    return Claims(jobs, int(following[0][1]))


@dataclass(frozen=True, slots=True)
class _Stopped:
    """A dequeue's jobs up to the priority ``by_lanes``, which it left to
    the lanes (``pinlater.stores.mysql.lanes``)."""

    jobs: list[ClaimedJob]
    by_lanes: int


class ClaimsMixin(LanesMixin):
    """Dequeue, peek, ACKs, checkpoints and expiring claims of ``MySQLBackend``."""

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
        if len(claim) > CLAIM_MAX:
            raise ValueError(f"source is too long ({len(source)} characters)")
        if limit <= 0 or not priorities:
            return Claims([])
        self._learn_layout()
        jobs: list[ClaimedJob] = []
        try:
            return self._claim(queue, priorities, limit, claim, look_ahead, allow, jobs)
        except PinLaterError as exc:
            keep_claimed(exc, jobs)
            raise

    def _claim(
        self, queue: str, priorities: Sequence[int], limit: int, claim: str, look_ahead: Sequence[int],
        allow: dict[str, int] | None, jobs: list[ClaimedJob],
    ) -> Claims:
        """``dequeue``'s rounds; ``jobs`` holds what they claimed so far."""
        rest = list(priorities)
        while True:
            if (queue, rest[0]) in self._lanes_seen:
                fair = rest[0]  # straight to its lanes: the plain dequeue would say so
            else:
                got = self._claim_plainly(queue, rest, limit - len(jobs), claim, look_ahead)
                jobs += got.jobs
                if isinstance(got, Claims):
                    return Claims(jobs, got.next_priority)
                fair = got.by_lanes
            # Priorities before it are done; it is served by its lanes, then
            # the ones after it as before.
            by_lanes, stopped = self._claim_by_lanes(queue, fair, limit - len(jobs), claim, allow)
            jobs += by_lanes
            rest = rest[rest.index(fair) + 1 :]
            if len(jobs) >= limit or stopped is not None:
                return Claims(jobs, None, stopped)
            if not rest:
                return Claims(jobs, self._look(queue, look_ahead))

    def _claim_plainly(
        self, queue: str, priorities: Sequence[int], limit: int, claim: str, look_ahead: Sequence[int]
    ) -> Claims | _Stopped:
        text = _dequeue_text(queue, tuple(priorities), tuple(look_ahead), self._traces)
        args = _dequeue_args(queue, priorities, limit, claim, look_ahead)

        def work(s: Session) -> Claims | _Stopped:
            # Committed when this returns: should the connection die after,
            # these jobs stay RUNNING until their claim times out (nothing is lost).
            return _claims(s.execute_script(text, args), limit, claim)

        try:
            return self._run(queue, (*priorities, *look_ahead), work)
        except MySQLWriteRefused:
            raise  # the claims' writes were refused: nothing was claimed
        except MySQLStorageError as exc:
            if error_code(exc) in LOCK_CONFLICT:
                raise  # the claim statement lost its locks: rolled back
            # Maybe after the COMMIT (a read back failed): the claims would
            # stay RUNNING, held by nobody, while the caller counts their
            # slots free. Undone, or the outcome is unknown.
            self._undo_claims(queue, priorities, claim, exc)
            raise

    def _undo_claims(self, queue: str, priorities: Sequence[int], claim: str, cause: MySQLStorageError) -> None:
        def work(s: Session) -> None:
            for p in priorities:
                s.execute(sql("dequeue_undo", table=job_table(queue, p)), [claim])

        try:
            self._run(queue, priorities, work)
        except PinLaterError as exc:
            raise ShardOutcomeUnknown(
                f"{cause} (after which the dequeue's claims, maybe committed, could not be undone: {exc})") from cause

    def _look(self, queue: str, look_ahead: Sequence[int]) -> int | None:
        """The first of ``look_ahead`` with a runnable job (see Claims)."""
        if not look_ahead:
            return None
        text, args = _look_ahead(queue, look_ahead), _look_ahead_args(look_ahead)

        def work(s: Session) -> int | None:
            s.execute(text, args)
            rows = s.fetchall()
            return int(rows[0][1]) if rows else None

        return self._run(queue, look_ahead, work)

    def peek(
        self, queue: str, priorities: Sequence[int], limit: int, look_ahead: Sequence[int] = ()
    ) -> Claims:
        if limit <= 0 or not priorities:
            return Claims([])
        self._learn_layout()
        text, args = _peek_script(queue, priorities, limit, look_ahead, self._traces)

        def work(s: Session) -> Claims:
            got = _claims(s.execute_script(text, args), limit, "")
            return got if isinstance(got, Claims) else Claims(got.jobs)  # a peek never stops

        return self._run(queue, (*priorities, *look_ahead), work)

    def _guarded(
        self,
        queue: str,
        items: Sequence[_Item],
        statement: str,
        values: Callable[[_Item, str], list[Any]],
    ) -> list[bool]:
        """Apply ``statement`` to the items whose job is RUNNING under a claim
        the item holds (``holds``), in one transaction. ``values(item,
        claim)`` gives the item's row of the joined values, ``claim`` being
        the job's claim as locked."""
        if not items:
            return []
        rounds = _rounds(items)
        tables = {item.priority: job_table(queue, item.priority) for item in items}
        self._learn_layout()
        keys = self._keys

        def work(s: Session) -> list[bool]:
            applied = [False] * len(items)
            for round_ in rounds:
                for priority, indexes in sorted(round_.items()):
                    table = tables[priority]
                    ids = [items[i].local_id for i in indexes]
                    s.execute(sql("lock_running", table=table, ids=len(ids)), ids)
                    running = {int(r[0]): r[1] for r in s.fetchall()}
                    chosen: list[int] = []
                    params: list[Any] = []
                    for i in indexes:
                        item = items[i]
                        claim = running.get(item.local_id)
                        if claim is None or not holds(claim, item.source, item.claim):
                            continue
                        chosen.append(i)
                        params += values(item, claim)
                    if not chosen:
                        continue
                    updated = s.execute(sql(statement, table=table, rows=len(chosen), fkey=keys), params)
                    if updated != len(chosen):  # cannot happen while the rows are locked
                        raise StorageError(
                            f"{statement} on {table}: {updated} of {len(chosen)} locked jobs"
                            " updated"
                        )
                    for i in chosen:
                        applied[i] = True
            return applied

        return self._run(queue, tables, work, transaction=True)

    def ack_succeeded(self, queue: str, items: Sequence[AckItem]) -> list[bool]:
        def args(indexes: list[int], marker: str | None) -> list[Any]:
            ids = [items[i].local_id for i in indexes]
            return [marker, *ids, *(items[i].append_custom_status for i in indexes),
                    *ids, *ids, *_holders(items, indexes)]

        return self._acked(queue, items, "ack_succeeded", args)

    def ack_failed(
        self, queue: str, items: Sequence[FailItem], delay_table: Sequence[int] = ()
    ) -> list[bool]:
        if not delay_table and any(it.delay_ms is None for it in items):
            raise ValueError("a failure ACK without its own delay needs the policy's delay table")
        table = json.dumps([int(d) for d in delay_table] or [0])
        last = max(0, len(delay_table) - 1)

        def args(indexes: list[int], marker: str | None) -> list[Any]:
            ids = [items[i].local_id for i in indexes]
            delays = [items[i].delay_ms for i in indexes]
            return [*ids, *delays, table, last, *ids, *(items[i].append_custom_status for i in indexes),
                    marker, *ids, *ids, *_holders(items, indexes)]

        return self._acked(queue, items, "ack_failed", args)

    def _acked(
        self,
        queue: str,
        items: Sequence[_Item],
        statement: str,
        args: Callable[[list[int], str | None], list[Any]],
    ) -> list[bool]:
        """ACKs: one guarded UPDATE per table (see ack_succeeded in the SQL
        file) whose row count tells all applied or all stale; only a mixed
        batch reads back which items this statement applied (by the marker
        it left; a single item needs none, so its claim stays). Items that
        name their claim and items that give a source go in statements of
        their own (``_by_holder``). Several statements (several tables, a
        job named twice, or both kinds of item) share one transaction, all
        or nothing as before."""
        if not items:
            return []
        self._learn_layout()
        keys = self._keys
        steps = [
            (job_table(queue, priority), exact, held)
            for round_ in _rounds(items)
            for priority, indexes in sorted(round_.items())
            for exact, held in _by_holder(items, indexes)
        ]

        def work(s: Session) -> list[bool]:
            applied = [False] * len(items)
            for table, exact, indexes in steps:
                # One item's row count tells applied from stale: no marker.
                marker = f"acked:{secrets.token_hex(CLAIM_TOKEN_LEN // 2)}" if len(indexes) > 1 else None
                stmt = sql(statement, table=table, ids=len(indexes), exact_claim=exact, fkey=keys)
                updated = s.execute(stmt, args(indexes, marker))
                if updated == len(indexes):
                    done = {items[i].local_id for i in indexes}
                elif updated == 0:
                    done = set()
                else:
                    s.execute(sql("ack_applied", table=table), [marker])
                    done = {int(row[0]) for row in s.fetchall()}
                for i in indexes:
                    applied[i] = items[i].local_id in done
            return applied

        tables = {item.priority for item in items}
        return self._run(queue, tables, work, transaction=len(steps) > 1)

    def checkpoint(self, queue: str, items: Sequence[CheckpointItem]) -> list[bool]:
        def values(item: CheckpointItem, claim: str) -> list[Any]:
            return [item.local_id, claim, item.new_body, item.attempts_allowed,
                    item.prepend_custom_status or "", item.run_after_ms,
                    1 if item.move_to_pending else 0]

        return self._guarded(queue, items, "checkpoint", values)

    def running_owners(self, queue: str, priority: int) -> dict[tuple[str, str], int]:
        table = job_table(queue, priority)

        def work(s: Session) -> dict[tuple[str, str], int]:
            s.execute(sql("running_owners", table=table, fkey=self._keys), (CLAIM_OWNER_LEN,))
            return {(str(owner), bytes(k).decode() if k else ""): int(n) for owner, k, n in s.fetchall()}

        return self._run(queue, (priority,), work)

    def expire_claims(
        self, queue: str, priority: int, timeout_ms: int, limit: int
    ) -> ExpiredClaims:
        table = job_table(queue, priority)
        if limit <= 0:
            return ExpiredClaims(0, 0)

        self._learn_layout()

        def work(s: Session) -> ExpiredClaims:
            # Two statements so that each count is known; each row's change is
            # one atomic, guarded UPDATE, so concurrent monitors expire a job once.
            args = {"timeout_ms": timeout_ms, "limit": limit}
            repended = s.execute(sql("expire_repend", table=table, fkey=self._keys), args)
            failed = 0
            if repended < limit:
                args["limit"] = limit - repended
                failed = s.execute(sql("expire_fail", table=table), args)
            return ExpiredClaims(repended, failed)

        return self._run(queue, (priority,), work)
