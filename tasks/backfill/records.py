"""Runs and pages of the bulk backfill in MySQL (``sql/backfill.sql``).

They live in the app data's first shard database: a backfill reads that
MySQL anyway, so it needs no store of its own to configure or keep up, and
a run spans every shard, so no shard is more natural than the one that is
always in the map. The tables are made on first use (IF NOT EXISTS).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pymysql.cursors import Cursor

from tasks.appdata.sql import SqlFile
from tasks.appdata.store import AppData
from tasks.backfill.plan import Plan
from tasks.backfill.progress import RATE_WINDOW_MS

sql = SqlFile("tasks.backfill", "sql/backfill.sql", ())
T = TypeVar("T")
# A run is running until its end: finished (every page done), failed (its
# pages' jobs ended without every page done) or cancelled (by an operator).
RUNNING, FINISHED, FAILED, CANCELLED = "running", "finished", "failed", "cancelled"
ENDED = (FINISHED, FAILED, CANCELLED)


class UnknownRun(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    kind: str
    cluster: str
    plan: Plan
    state: str  # running, or how it ended (ENDED)
    created_at_ms: int
    finished_at_ms: int | None

    @property
    def total_pages(self) -> int:
        return self.plan.total_pages


@dataclass(frozen=True, slots=True)
class Counts:
    pages_done: int
    users_done: int
    cells: int
    recent_pages: int
    recent_users: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class PageRow:
    shard: int
    page: int
    runs: int
    started_at_ms: int
    done_at_ms: int | None


def _run(row: Sequence[Any]) -> Run:
    run_id, kind, cluster, page_size, _total, plan, state, created, finished = row
    pages = {int(shard): int(n) for shard, n in json.loads(plan).items()}
    return Run(int(run_id), str(kind), str(cluster), Plan(int(page_size), pages), str(state), int(created),
               None if finished is None else int(finished))


class Records:
    """The runs and pages, on ``store``'s first shard."""

    def __init__(self, store: AppData) -> None:
        self.store = store
        self.shard = store.shard_map.shards[0]
        self._database = store.locate(self.shard).database
        self._ensured = False

    def _do(self, work: Callable[[Cursor], T]) -> T:
        if not self._ensured:
            self.store.run(self.shard, lambda cursor, _db: self._create(cursor))
            self._ensured = True
        return self.store.run(self.shard, lambda cursor, _db: work(cursor))

    def _create(self, cursor: Cursor) -> None:
        cursor.execute(sql("create_runs", database=self._database))
        cursor.execute(sql("create_pages", database=self._database))

    def _stmt(self, name: str) -> str:
        return sql(name, database=self._database)

    # -- runs ---------------------------------------------------------------------
    def create_run(self, kind: str, cluster: str, plan: Plan) -> Run:
        state = RUNNING if plan.total_pages else FINISHED  # nothing to do: done at once
        text = json.dumps({str(shard): n for shard, n in plan.pages.items()}, separators=(",", ":"))

        def insert(cursor: Cursor) -> int:
            cursor.execute(self._stmt("insert_run"), (kind, cluster, plan.page_size, plan.total_pages, text, state))
            return int(cursor.lastrowid)

        return self.get_run(self._do(insert))

    def get_run(self, run_id: int) -> Run:
        def fetch(cursor: Cursor) -> tuple[Any, ...] | None:
            cursor.execute(self._stmt("get_run"), (run_id,))
            return cursor.fetchone()

        row = self._do(fetch)
        if row is None:
            raise UnknownRun(f"no backfill run {run_id}")
        return _run(row)

    def recent_runs(self, limit: int = 20) -> list[Run]:
        def fetch(cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
            cursor.execute(self._stmt("recent_runs"), (limit,))
            return cursor.fetchall()

        return [_run(row) for row in self._do(fetch)]

    def end_run(self, run_id: int, state: str, *, was_failed: bool = False) -> bool:
        """Marks the running run ended in ``state`` (one of ENDED); True if
        this call did. ``was_failed``: a failed run may end so too (it is
        finished once the pages an operator put back are done)."""
        if state not in ENDED:
            raise ValueError(f"a run ends {', '.join(ENDED)}, not {state!r}")
        args = (state, run_id, RUNNING, FAILED if was_failed else RUNNING)
        return self._do(lambda cursor: cursor.execute(self._stmt("end_run"), args)) == 1

    def counts(self, run_id: int) -> Counts:
        def fetch(cursor: Cursor) -> tuple[Any, ...]:
            cursor.execute(self._stmt("run_counts"), (RATE_WINDOW_MS, RATE_WINDOW_MS, run_id))
            row = cursor.fetchone()
            assert row is not None  # an aggregate always has a row
            return row

        return Counts(*(int(v) for v in self._do(fetch)))

    # -- pages --------------------------------------------------------------------
    def page_done(self, run_id: int, shard: int, page: int) -> bool:
        def fetch(cursor: Cursor) -> bool:
            cursor.execute(self._stmt("page_done_at"), (run_id, shard, page))
            row = cursor.fetchone()
            return row is not None and row[0] is not None

        return self._do(fetch)

    def start_page(self, run_id: int, shard: int, page: int) -> None:
        self._do(lambda cursor: cursor.execute(self._stmt("page_started"), (run_id, shard, page)))

    def finish_page(self, run_id: int, shard: int, page: int, users: int, cells: int) -> bool:
        """Marks the page done; True if this call did."""
        args = (users, cells, run_id, shard, page)
        return self._do(lambda cursor: cursor.execute(self._stmt("page_finished"), args)) == 1

    def pages(self, run_id: int) -> list[PageRow]:
        def fetch(cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
            cursor.execute(self._stmt("run_pages"), (run_id,))
            return cursor.fetchall()

        return [PageRow(int(s), int(p), int(r), int(st), None if d is None else int(d))
                for s, p, r, st, d in self._do(fetch)]
