"""Helpers of the backfill tests: a small generated graph, waiting for
runs, reading feed rows with their timestamps, the expected feeds, and the
``store`` and ``pair`` fixtures of data of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest

from tasks.appdata import generate
from tasks.appdata.generate import GraphSpec, GraphSummary
from tasks.appdata.store import AppData
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.records import FINISHED, Records, Run
from tasks.feeds import backfill_kind
from tasks.feeds.cells import FAMILY, TABLE, row_key
from tasks.feeds.settings import FeedSettings
from tasks.hbase import ClusterPair, get_versions
from tests.feeds.world import FeedWorld
from tests.support.appdata import shard_databases
from tests.support.hbase import tables_pair
from tests.support.waits import wait_progressing


def small_graph(store: AppData, seed: int, users: int = 120) -> GraphSummary:
    """A heavy-tailed graph: one account with a third of the users as
    followers, board follows, a few pins per board."""
    spec = GraphSpec(users=users, boards=users // 2, pins=users * 3, follows_per_user=4, board_follows_per_user=1,
                     celebrities=1, celebrity_followers=users // 3, seed=seed)
    return generate.generate(store, spec)


def wait_finished(world: FeedWorld, runs: list[Run], timeout: float = 60.0, limit: float = 180.0) -> list[Run]:
    """The runs once all have finished. ``timeout`` is the longest wait in
    which no page of them and no feed job finishes, ``limit`` the longest
    in all: a loaded machine is slow, a stuck run still fails fast."""
    records = Records(world.store)

    def done() -> list[Run] | None:
        now = [records.get_run(run.id) for run in runs]
        return now if all(run.state == FINISHED for run in now) else None

    def progress() -> int:
        return sum(records.counts(run.id).pages_done for run in runs) + world.finished()

    try:
        finished: list[Run] = wait_progressing(done, progress, timeout, max(timeout, limit),
                                               what="the backfill runs to finish")
    except AssertionError as e:
        logs = "\n".join(f"--- {name}\n{world.procs.log(name)[-3000:]}" for name in world.workers)
        raise AssertionError(f"{e}: {[records.counts(r.id) for r in runs]}\n{logs}") from None
    return finished


def expected_columns(ctx: BackfillContext, cluster: str, user: int) -> dict[str, int]:
    """The feed columns MySQL says ``user`` should have, each at the time of
    the newest follow that brings it (the version a read shows)."""
    want = backfill_kind.truth(ctx, user, FeedSettings.from_env(ctx.env)).expected
    return {column: max(versions) for column, versions in want.items()}


def row(pair: ClusterPair, cluster: str, user: int) -> dict[str, int]:
    """``user``'s feed row on ``cluster``: column -> the version a read shows."""
    key = row_key(user)
    cells = get_versions(pair[cluster], TABLE, [key], columns=[FAMILY.encode()], max_versions=1).get(key, {})
    return {column.split(b":", 1)[1].decode(): versions[0][0] for column, versions in cells.items()}


def data_fixtures(env: dict[str, str], scope: Literal["session", "module"]) -> tuple[Any, Any]:
    """The ``store`` and ``pair`` fixtures of a test module or directory:
    app-data shard databases and HBase tables of its own, named by ``env``."""

    @pytest.fixture(scope=scope)
    def store(servers: None) -> Iterator[AppData]:
        with shard_databases(env) as made:
            yield made

    @pytest.fixture(scope=scope)
    def pair(servers: None) -> Iterator[ClusterPair]:
        with tables_pair(env["PINLATER_HBASE_TABLE_PREFIX"]) as made:
            yield made

    return store, pair
