"""Fair service between fairness keys on a MySQL shard: the rules of
``pinlater/stores/memory/lanes.py`` (and of the Redis scripts), over
tables. A part of ``MySQLBackend``.

A keyed job enters pending in state 5, written by the same single
statement as before (an enqueue, a failure ACK, a checkpoint, an expired
claim, a retry), so no path that makes a job pending takes a lock more.
The next dequeue of its table admits such jobs, in the order they came,
into their lanes (``pinlater_lane_jobs``, state 4; a backlog of them
ADMIT a transaction), then serves the lanes in turn: ``pinlater_lanes``
holds each keyed lane's turn, or the run_after it waits for; the jobs
without a key are lane '', read from the job table's own index (state 0),
whose turn is in ``pinlater_fair`` with the turn counter. One dequeue of a
table's lanes runs at a time (``fair_lock``). A dequeue of a table with no
lane and no newcomer claims as before, in its one round trip; one with
lanes costs a transaction of about a dozen statements, whatever the number
of keys, sent in two round trips when no newcomer waits and its first page
of lanes is full (multi-statement texts: the first also reads what the
dequeue reads next, the page's lanes with their first jobs, used unless an
admission or a promotion changed the turns meanwhile), a few more
otherwise. Each statement has a fixed cost however little it reads
(15-30 us of a round trip for one-row statements on an idle 2-core host,
more when it is busy), and the table's lanes stay locked from the first
round trip to the last: statements a dequeue does not need are not sent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pinlater.errors import PinLaterError
from pinlater.kit.sqlblocks import job_table
from pinlater.stores.base import ClaimedJob, keep_claimed
from pinlater.stores.mysql.connection import ShardConnection
from pinlater.stores.mysql.pool import INLINE, Session
from pinlater.stores.mysql.statements import sql

# Lanes that came due joining the turns beyond the limit (as the Redis script).
PROMOTE = 100
# Newcomers admitted by one transaction at most, the first that came: a
# backlog of them is admitted a transaction at a time, each statement's
# time bounded, however long the backlog (all at once, 400,000 took one
# dequeue past the store's socket timeout, every time it was tried).
ADMIT = 2000
# Transactions of admissions one dequeue goes through at most before it
# serves: newcomers that keep coming faster than they are admitted do not
# hold the dequeue for good (those left join their lanes at later ones).
ADMIT_ROUNDS = 25
# Lanes met without a job taken (empty ones leaving, ones whose first job
# is not due) that end a transaction: a table can hold any number of them
# (every job of 50,000 keys deleted took one dequeue 12 s, holding the
# table's lanes), so one transaction must not meet them all. Pages of
# lanes grow with them, to PAGE_MAX lanes a statement.
LANE_WASTE = 1000
PAGE_MAX = 1000
# Transactions one dequeue goes through at most while each meets LANE_WASTE
# such lanes: lanes left empty by a mass delete are cleared this many
# thousand a dequeue.
LANE_ROUNDS = 25


@dataclass
class _Lane:
    turn: int | None
    due: int | None
    heads: list[tuple[int, int]] = field(default_factory=list)  # (run_after, id), first first
    complete: bool = False  # heads holds every job of the lane
    taken: set[int] = field(default_factory=set)  # by this dequeue, still in the table until it ends
    changed: bool = False


class _Turns:
    """One table's lanes as far as a dequeue has read them."""

    def __init__(self, s: Session, table: str, turn: int, plain_turn: int, now: int) -> None:
        self.s, self.table, self.turn, self.plain_turn, self.now = s, table, turn, plain_turn, now
        self.lanes: dict[bytes, _Lane] = {}
        self.dropped: set[bytes] = set()
        self.keyed = False  # a keyed lane was met
        self.met_newcomers = False  # newcomers waited when the turns were locked
        self.more_newcomers = False  # admitted ADMIT of them: there may be more
        self.more_lanes = False  # served stopped at LANE_WASTE lanes without a job
        # Read in the dequeue's first round trip, while still what the
        # tables hold (None: read them when needed): lanes_due's rows,
        # plain_heads' and lanes_in_turn's first page.
        self.due_rows: list[tuple[Any, ...]] | None = None
        self.plain_rows: list[tuple[Any, ...]] | None = None
        self.first_page: list[tuple[Any, ...]] | None = None

    def next_turn(self) -> int:
        self.turn += 1
        return self.turn

    def _lane(self, name: bytes) -> _Lane:
        lane = self.lanes.get(name)
        if lane is None:
            lane = self.lanes[name] = _Lane(None, None)
            self.dropped.discard(name)
        return lane

    def wait_for(self, name: bytes, run_after: int) -> None:
        """The lane got a job not due yet: out of turn, it waits for the
        earliest such job."""
        lane = self._lane(name)
        if lane.turn is None and (lane.due is None or lane.due > run_after):
            lane.due, lane.changed = run_after, True

    def give_turn(self, name: bytes) -> None:
        """The lane got a due job: out of turn, it takes the next turn."""
        lane = self._lane(name)
        if lane.turn is None:
            lane.turn, lane.due, lane.changed = self.next_turn(), None, True

    def remove(self, name: bytes) -> None:
        self.lanes.pop(name, None)
        self.dropped.add(name)

    def changes(self) -> list[tuple[str, list[Any]]]:
        """The statements that store the lanes changed since the last
        (positional arguments); the lanes count as stored from here on."""
        out: list[tuple[str, list[Any]]] = []
        changed = [(n, lane) for n, lane in self.lanes.items() if lane.changed]
        if changed:
            values: list[Any] = []
            for n, lane in changed:
                values += [self.table, n, lane.turn, lane.due]
                lane.changed = False
            out.append((sql("lanes_put", rows=len(changed)), values))
        if self.dropped:
            out.append((sql("lanes_drop", ids=len(self.dropped)), [self.table, *self.dropped]))
            self.dropped.clear()
        return out

    def flush(self) -> None:
        for stmt, args in self.changes():
            self.s.execute(stmt, args)

    def stored(self) -> tuple[str, list[Any]]:
        """The statement that stores the turn counters."""
        return sql("fair_store"), [self.turn, self.plain_turn, self.table]


class LanesMixin(ShardConnection):
    def _claim_by_lanes(
        self, queue: str, priority: int, want: int, claim: str, allow: dict[str, int] | None = None,
    ) -> tuple[list[ClaimedJob], str | None]:
        """The jobs, and the key that ended the call with allowances (None:
        none did; ``ShardBackend.dequeue``)."""
        table = job_table(queue, priority)
        traced = self._traces
        stopped: str | None = None
        rounds = 0
        more_lanes = False
        need = want

        def work(s: Session) -> list[ClaimedJob] | None:
            nonlocal stopped, rounds, more_lanes
            t = _locked_and_admitted(s, table, need, begin=True,
                                     expect_newcomers=(queue, priority) in self._newcomers_seen)
            if t.met_newcomers:
                self._newcomers_seen.add((queue, priority))
            else:
                self._newcomers_seen.discard((queue, priority))
            rounds += 1
            if t.more_newcomers and rounds < ADMIT_ROUNDS:
                s.execute(*t.stored())
                return None  # committed as it is; the next transaction admits more
            _promote(t, need)
            order, keys, stopped = _serve(t, need, allow)
            more_lanes = t.more_lanes
            if t.keyed:
                self._lanes_seen.add((queue, priority))
            else:
                self._lanes_seen.discard((queue, priority))
            # The last round trip: the lanes and turns stored, the jobs
            # claimed, committed, then read back (the turns' lock is not
            # held for the read: the claimed jobs are this call's).
            stmts = [*t.changes(), t.stored()]
            read, read_args = "", []
            if order:
                stmts += [(sql("lane_jobs_take", ids=len(order)), [table, *order]),
                          (sql("lanes_claim", table=table, ids=len(order)), [claim, *order])]
                read, read_args = sql("lanes_read", table=table, priority=priority, trace=traced), [claim]
            results = s.commit_results(";\n".join(stmt for stmt, _ in stmts),
                                       [*(a for _, args in stmts for a in args), *read_args], then=read)
            if not order:
                return []
            rows = {int(r[0]): r for r in results[-1]}
            return [ClaimedJob(i, priority, bytes(r[1]), int(r[2]), int(r[3]), claim, r[5], int(r[6]), key)
                    for i, key in zip(order, keys, strict=True) if (r := rows.get(i)) is not None]

        got: list[ClaimedJob] = []
        for _ in range(LANE_ROUNDS):
            try:
                while (jobs := self._run(queue, (priority,), work, transaction=INLINE)) is None:
                    pass
            except PinLaterError as exc:
                keep_claimed(exc, got)
                raise
            if allow is not None:
                for job in jobs:
                    if job.key:
                        allow[job.key] -= 1
            got += jobs
            need = want - len(got)
            # Stopped at LANE_WASTE lanes without a job: committed as far as
            # it went, the next transaction goes on.
            if not more_lanes or stopped is not None or need <= 0:
                break
        return got, stopped

    def lane_keys(self, queue: str, priorities: Sequence[int], limit: int) -> list[str]:
        if limit < 1 or not priorities:
            return []
        self._learn_layout()
        if not self._keys:
            return []

        def work(s: Session) -> list[str]:
            out: dict[str, None] = {}
            for p in priorities:  # in order, until ``limit`` keys are found
                if len(out) >= limit:
                    break
                s.execute(sql("lanes_first_keys", table=job_table(queue, p)),
                          {"jobs": job_table(queue, p), "limit": limit - len(out)})
                out.update(dict.fromkeys(bytes(k).decode() for k, in s.fetchall() if k))
            return list(out)

        return self._run(queue, tuple(priorities), work)

    def _admit_newcomers(self, s: Session, table: str) -> None:
        """Inside a transaction about to delete pending jobs: the keyed jobs
        not in their lanes yet are put there first, so that their lanes
        have taken their turns as if they had been at once (the Redis
        scripts put a job in its lane as it enters pending)."""
        if not self._keys or not s.scalar(sql("has_newcomers", table=table)):
            return
        while True:
            t = _locked_and_admitted(s, table)
            s.execute(*t.stored())
            if not t.more_newcomers:
                return


# A dequeue's first statements: the table's turns locked, the time, and
# whether newcomers wait.
_LOCK = ("fair_lock", "lanes_now", "lanes_now_read")
# The newcomers' admission: the first ADMIT of them join their lanes' jobs,
# and their lanes are read. In the first round trip when the table's last
# dequeue here met newcomers (each statement reads nothing when none
# waits), else in a round trip of its own when some do.
_NEWCOMERS = ("lanes_bound", "lanes_newcomers", "lanes_bound_read", "lanes_touched")
# What a dequeue of ``want`` jobs reads next, while nothing has changed
# yet: the jobs without a key (which an admission leaves as they are), and
# the lanes' turns (read again by an admission, so read ahead only when no
# newcomer is expected).
_READ_AHEAD = ("plain_heads",)
_TURNS_AHEAD = ("lanes_due", "lanes_in_turn")


def _locked_and_admitted(
    s: Session, table: str, want: int | None = None, begin: bool = False, expect_newcomers: bool = True,
) -> _Turns:
    """The table's turns, locked until the transaction ends, with the
    newcomers (state 5) admitted into their lanes, as if each had joined as
    it came (the Redis scripts touch a lane as its job enters pending): a
    lane takes a turn at the first of its newcomers that was due when it
    came, lanes in that order; one without such a newcomer waits for the
    earliest. One round trip without newcomers, one more with them (two
    when ``expect_newcomers`` is off): the first ADMIT that came at most
    (``more_newcomers``: more may wait, for another transaction to admit).
    With ``want``, the same round trip reads what a dequeue of that many
    reads next (``_Turns.due_rows`` ...; the lanes' turns, with
    ``expect_newcomers``, in the round trip that admits them).
    ``begin``: the round trip begins the transaction (``ConnectionPool.run``'s
    INLINE); ``expect_newcomers``: it admits newcomers too (``_NEWCOMERS``)."""
    ahead = want or 0
    args = {**_turns_args(table, ahead), "limit": ahead, "admit_last": ADMIT - 1}
    names = [*_LOCK, *(_NEWCOMERS if expect_newcomers else ())]
    if want is not None:
        names += [*_READ_AHEAD, *(() if expect_newcomers else _TURNS_AHEAD)]
    text = ";\n".join(sql(n, table=table) for n in names)
    results = s.begin_results(text, args) if begin else s.execute_results(text, args)
    if not results[0]:
        # The table's first dequeue by lanes: its row made (and locked),
        # then everything read again under that lock.
        s.execute(sql("fair_make"), args)
        results = s.execute_results(text, args)
    locked, now, *rest = results
    turn, plain_turn = (int(x) for x in locked[0])
    t = _Turns(s, table, turn, plain_turn, int(now[0][0]))
    t.met_newcomers = bool(now[0][1])
    if expect_newcomers:
        more, touched_rows, *rest = rest
    elif t.met_newcomers:
        more, touched_rows = s.execute_results(";\n".join(sql(n, table=table) for n in _NEWCOMERS), args)
    else:
        more, touched_rows = ((0,),), ()
    t.more_newcomers = bool(more[0][0])
    if want is not None:
        t.plain_rows, *turns = (list(r) for r in rest)
        if turns:
            t.due_rows, t.first_page = turns
    if touched_rows:
        t.keyed = True
        _admit(t, touched_rows, want)
    elif want is not None and expect_newcomers:
        # None came after all: the turns as they are.
        t.due_rows, t.first_page = (list(r) for r in s.execute_results(_turns_text(), _turns_args(t.table, want)))
    return t


def _turns_text() -> str:
    return ";\n".join(sql(n) for n in _TURNS_AHEAD)


def _turns_args(table: str, want: int) -> dict[str, Any]:
    return {"jobs": table, "after": -1, "due_limit": want + PROMOTE, "page_limit": want + 1}


def _admit(t: _Turns, touched: Sequence[tuple[Any, ...]], want: int | None) -> None:
    """The lanes of newcomers (lanes_touched's rows) take their turns or
    waits, and the newcomers are in their lanes from here on: stored in
    one round trip, which also reads again what a dequeue of ``want`` reads
    next (lanes_due, lanes_in_turn: the turns read before may be out of
    date; jobs without a key are not)."""
    for key, _, _, turn, due, known in touched:
        if known:
            t.lanes[bytes(key)] = _Lane(None if turn is None else int(turn), None if due is None else int(due))
    for key, _, soonest, *_ in touched:
        t.wait_for(bytes(key), int(soonest))
    for key, *_ in sorted((x for x in touched if x[1] is not None), key=lambda x: str(x[1])):
        t.give_turn(bytes(key))  # due when it came: a turn, in the order they came
    stmts: list[tuple[str, Any]] = [(sql("lanes_admit", table=t.table), {"jobs": t.table}), *t.changes()]
    if want is not None:
        stmts += [(sql(n), _turns_args(t.table, want)) for n in _TURNS_AHEAD]
    results = t.s.execute_rendered([t.s.render(stmt, args) for stmt, args in stmts])
    t.due_rows, t.first_page = (list(r) for r in results) if want is not None else (None, None)


def _promote(t: _Turns, want: int) -> None:
    rows = t.due_rows
    if rows is None:
        t.s.execute(sql("lanes_due"), {"jobs": t.table, "due_limit": want + PROMOTE})
        rows = list(t.s.fetchall())
    if rows:
        t.keyed = True
        t.first_page = None  # the lanes promoted take turns it did not see
    for name, _ in rows:
        lane = t.lanes.setdefault(bytes(name), _Lane(None, None))
        lane.turn, lane.due, lane.changed = t.next_turn(), None, True
    t.flush()


def _serve(t: _Turns, want: int, allow: dict[str, int] | None = None) -> tuple[list[int], list[str], str | None]:
    """Up to ``want`` jobs, one at a time from the lane of the lowest turn
    that has a due job (memory/lanes.py's ``take``): the ids in that order,
    their keys, and the key that ended the call with allowances (None).
    ``allow`` is only read: the caller counts the jobs it got."""
    s = t.s
    if t.plain_rows is None:
        s.execute(sql("plain_heads", table=t.table), {"limit": want})
        t.plain_rows = list(s.fetchall())
    plain = [(int(ra), int(i)) for ra, i in t.plain_rows]
    plain.reverse()  # the first last, to pop
    # Keyed lanes in turn, read a page at a time; lanes served again go last,
    # after every lane not read yet.
    queue: list[tuple[int, bytes]] = []
    read_up_to, more = -1, True
    taken: list[int] = []
    wasted = 0

    def read_page() -> None:
        nonlocal read_up_to, more
        rows = t.first_page if read_up_to == -1 else None
        page_limit = want + 1
        if rows is None:
            page_limit = max(want + 1, min(want + 1 + wasted, PAGE_MAX))
            s.execute(sql("lanes_in_turn"), {"jobs": t.table, "after": read_up_to, "page_limit": page_limit})
            rows = list(s.fetchall())
        page = [(int(turn), bytes(lane)) for lane, turn, _ in rows]
        t.keyed = t.keyed or bool(page)
        more = len(page) == page_limit
        if page:
            read_up_to = page[-1][0]
        fresh = [(turn, lane) for turn, lane in page if lane not in t.dropped]
        for turn, lane in fresh:
            t.lanes.setdefault(lane, _Lane(turn, None)).turn = turn
        if more:
            # A full page: the loop serves each of its lanes once at most
            # before it reads the next page, so their first jobs, read with
            # the page, are enough (a lane served again reads more then).
            for (_, lane), (_, _, head) in zip(page, rows, strict=True):
                known = t.lanes.get(lane)
                if known is None or lane in t.dropped or known.heads or known.complete or known.taken:
                    continue
                if head is None:
                    known.complete = True
                else:
                    run_after, local_id = (head.decode() if isinstance(head, bytes | bytearray) else head).split()
                    known.heads = [(int(run_after), int(local_id))]
        else:
            _read_heads(t, [lane for _, lane in fresh], want)
        queue.extend(fresh)
        queue.sort()

    keys: list[str] = []
    left = None if allow is None else {k.encode(): n for k, n in allow.items()}
    passed: set[bytes] = set()
    read_page()
    while len(taken) < want:
        if wasted >= LANE_WASTE:
            t.more_lanes = True
            break
        if more and (not queue or queue[0][0] > read_up_to):
            read_page()
        keyed = queue[0] if queue else None
        plain_due = bool(plain) and plain[-1][0] <= t.now
        if plain_due and (keyed is None or t.plain_turn < keyed[0]):
            taken.append(plain.pop()[1])
            keys.append("")
            t.plain_turn = t.next_turn()
            passed.clear()
            continue
        if keyed is None:
            break
        queue.pop(0)
        name = keyed[1]
        lane = t.lanes[name]
        if not lane.heads and not lane.complete:
            _read_heads(t, [name], want)
        if not lane.heads:
            t.remove(name)
            wasted += 1
            continue
        run_after, local_id = lane.heads[0]
        if run_after > t.now:
            lane.turn, lane.due, lane.changed = None, run_after, True
            wasted += 1
            continue
        if left is not None:
            n = left.get(name)
            if n is None or name in passed:
                return taken, keys, name.decode()  # it keeps its turn
            if n <= 0:
                # It loses the turn it cannot use, as if served. Not waste:
                # such lanes are keys of ``allow``, a few per job asked for.
                passed.add(name)
                lane.turn, lane.changed = t.next_turn(), True
                queue.append((lane.turn, name))
                continue
        lane.heads.pop(0)
        lane.taken.add(local_id)
        taken.append(local_id)
        keys.append(name.decode())
        if left is not None:
            left[name] -= 1
            passed.clear()
        lane.turn, lane.changed = t.next_turn(), True
        queue.append((lane.turn, name))
    return taken, keys, None


def _read_heads(t: _Turns, names: list[bytes], want: int) -> None:
    """The first jobs of these lanes: enough for ``want`` jobs shared
    between them, and one more each to know a lane's next."""
    names = [n for n in names if not t.lanes[n].complete]
    if not names:
        return
    k = math.ceil(want / len(names)) + 1
    branches = "\nUNION ALL\n".join([sql("lane_heads")] * len(names))
    args: list[Any] = []
    for n in names:
        args += [t.table, n, k + len(t.lanes[n].taken)]
    t.s.execute(branches, args)
    found: dict[bytes, list[tuple[int, int]]] = {n: [] for n in names}
    for lane, run_after, local_id in t.s.fetchall():
        found[bytes(lane)].append((int(run_after), int(local_id)))
    for n in names:
        lane = t.lanes[n]
        got = sorted(found[n])
        lane.complete = len(got) < k + len(lane.taken)
        lane.heads = [h for h in got if h[1] not in lane.taken]
