"""The MySQL control store's batches (``pinlater.stores.control.Batches``):
the tables ``pinlater_batches`` and ``pinlater_batch_jobs`` (``sql/mysql.sql``,
the ``batch_*`` blocks). Each change is one transaction that locks the jobs'
rows, then their batches' rows in id order."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pinlater.stores.control import COMPLETE, COUNTING_BATCH_STATES, ENDED_OK, OPEN, SEALED, BatchRecord, Doc
from pinlater.stores.mysql.pool import Session
from pinlater.stores.mysql.statements import sql


class MySQLBatches:
    _run: Callable[..., Any]

    def batch_create(self, batch: str, doc: Doc) -> bool:
        return bool(self._run(lambda s: s.execute(sql("batch_create"), {"id": batch, "doc": json.dumps(doc)})))

    def batch_join(self, batch: str, descriptors: Sequence[str]) -> bool:
        wanted = sorted(set(descriptors))
        if not wanted:
            return self.batch_get(batch) is not None

        def work(s: Session) -> bool:
            s.execute(sql("batch_jobs_lock", ids=len(wanted)), wanted)
            before = {str(r[0]): (str(r[1]), r[2]) for r in s.fetchall()}
            others = sorted({b for b, _ in before.values() if b != batch})
            s.execute(sql("batch_lock", ids=len(others) + 1), [batch, *others])
            states = {str(r[0]): str(r[1]) for r in s.fetchall()}
            if states.get(batch) not in (OPEN, SEALED):
                return False
            for other in others:
                gone = [outcome for b, outcome in before.values() if b == other]
                ok = sum(1 for o in gone if o == ENDED_OK)
                failed = sum(1 for o in gone if o and o != ENDED_OK)
                if other in states:
                    s.execute(sql("batch_counts"), [-len(gone), -ok, -failed, states[other], other])
            s.execute(sql("batch_jobs_put", rows=len(wanted)), [v for d in wanted for v in (d, batch)])
            added = sum(1 for d in wanted if before.get(d, ("", None))[0] != batch)
            s.execute(sql("batch_counts"), [added, 0, 0, states[batch], batch])
            return True

        return bool(self._run(work, transaction=True))

    def batch_seal(self, batch: str) -> bool:
        def work(s: Session) -> bool:
            s.execute(sql("batch_lock", ids=1), [batch])
            rows = s.fetchall()
            if not rows or str(rows[0][1]) != OPEN:
                return False
            total, ok, failed = int(rows[0][2]), int(rows[0][3]), int(rows[0][4])
            complete = ok + failed >= total
            s.execute(sql("batch_counts"), [0, 0, 0, COMPLETE if complete else SEALED, batch])
            return complete

        return bool(self._run(work, transaction=True))

    def batch_end(self, ended: Mapping[str, str]) -> list[str]:
        wanted = sorted(ended)
        if not wanted:
            return []

        def work(s: Session) -> list[str]:
            s.execute(sql("batch_jobs_lock", ids=len(wanted)), wanted)
            open_ends = {str(r[0]): str(r[1]) for r in s.fetchall() if r[2] is None}
            if not open_ends:
                return []
            ids = sorted(set(open_ends.values()))
            s.execute(sql("batch_lock", ids=len(ids)), ids)
            live = {str(r[0]): (str(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in s.fetchall()
                    if str(r[1]) in COUNTING_BATCH_STATES}
            counted = [d for d, b in open_ends.items() if b in live]
            done: list[str] = []
            for outcome in sorted({ended[d] for d in counted}):
                these = [d for d in counted if ended[d] == outcome]
                s.execute(sql("batch_jobs_end", ids=len(these)), [outcome, *these])
            for b, (state, total, ok, failed) in live.items():
                mine = [d for d in counted if open_ends[d] == b]
                add_ok = sum(1 for d in mine if ended[d] == ENDED_OK)
                add_failed = len(mine) - add_ok
                if not mine:
                    continue
                complete = state == SEALED and ok + add_ok + failed + add_failed >= total
                s.execute(sql("batch_counts"), [0, add_ok, add_failed, COMPLETE if complete else state, b])
                if complete:
                    done.append(b)
            return done

        return list(self._run(work, transaction=True))

    def batch_state(self, batch: str, from_states: Sequence[str], to: str) -> bool:
        stmt = sql("batch_set_state", ids=len(from_states))
        return bool(self._run(lambda s: s.execute(stmt, [to, batch, *from_states])))

    def batch_get(self, batch: str) -> BatchRecord | None:
        def work(s: Session) -> BatchRecord | None:
            s.execute(sql("batch_get"), [batch])
            rows = s.fetchall()
            return _record(rows[0]) if rows else None

        return self._run(work)  # type: ignore[no-any-return]

    def batch_unended(self, batch: str, limit: int, cursor: str = "") -> tuple[list[str], str]:
        def work(s: Session) -> tuple[list[str], str]:
            s.execute(sql("batch_jobs_page"), [batch, cursor, limit])
            rows = s.fetchall()
            more = str(rows[-1][0]) if len(rows) == limit else ""
            return [str(r[0]) for r in rows if r[1] is None], more

        return self._run(work)  # type: ignore[no-any-return]

    def batch_list(
        self, states: Sequence[str], limit: int, idle_ms: int = 0, newest_first: bool = False,
        after: tuple[int, str] | None = None,
    ) -> list[BatchRecord]:
        since, past = after if after is not None else (-1, "")

        def work(s: Session) -> list[BatchRecord]:
            found: list[BatchRecord] = []
            for state in sorted(set(states)):
                if newest_first:
                    s.execute(sql("batch_list_newest"), [state, idle_ms, limit])
                else:
                    s.execute(sql("batch_list"), [state, idle_ms, since, since, past, limit])
                found += [_record(r) for r in s.fetchall()]
            found.sort(key=lambda r: (r.updated_ms, r.batch), reverse=newest_first)
            return found[:limit]

        return self._run(work)  # type: ignore[no-any-return]

    def batch_drop(self, batch: str) -> None:
        def work(s: Session) -> None:
            while s.execute(sql("batch_drop_jobs"), [batch]):
                pass
            s.execute(sql("batch_drop"), [batch])

        self._run(work)


def _record(row: Sequence[Any]) -> BatchRecord:
    doc = row[1].decode() if isinstance(row[1], bytes) else row[1]
    return BatchRecord(str(row[0]), json.loads(doc), str(row[2]), int(row[3]), int(row[4]), int(row[5]),
                       int(row[6]), int(row[7]))

