"""Helpers of the backfill tests: a small generated graph, waiting for
runs, reading feed rows with their timestamps, the expected feeds."""

from __future__ import annotations

from tasks.appdata import generate
from tasks.appdata.generate import GraphSpec, GraphSummary
from tasks.appdata.store import AppData
from tasks.backfill import feeds_kind
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.records import FINISHED, Records, Run
from tasks.feeds.settings import FeedSettings
from tasks.hbase import ClusterPair
from tests.feeds.world import FeedWorld
from tests.workers.harness import wait_until


def small_graph(store: AppData, seed: int, users: int = 120) -> GraphSummary:
    """A heavy-tailed graph: one account with a third of the users as
    followers, board follows, a few pins per board."""
    spec = GraphSpec(users=users, boards=users // 2, pins=users * 3, follows_per_user=4, board_follows_per_user=1,
                     celebrities=1, celebrity_followers=users // 3, seed=seed)
    return generate.generate(store, spec)


def wait_finished(world: FeedWorld, runs: list[Run], timeout: float = 60.0) -> list[Run]:
    records = Records(world.store)

    def done() -> list[Run] | None:
        now = [records.get_run(run.id) for run in runs]
        return now if all(run.state == FINISHED for run in now) else None

    try:
        finished: list[Run] = wait_until(done, timeout, interval=0.2, what="the backfill runs to finish")
    except AssertionError:
        logs = "\n".join(f"--- {name}\n{world.procs.log(name)[-3000:]}" for name in world.workers)
        raise AssertionError(f"runs not finished: {[records.counts(r.id) for r in runs]}\n{logs}") from None
    return finished


def expected_columns(ctx: BackfillContext, cluster: str, user: int) -> dict[str, int]:
    """The feed columns MySQL says ``user`` should have, with their follow times."""
    return feeds_kind.truth(ctx, cluster, user, FeedSettings.from_env(ctx.env).recent_pins).expected


def row(pair: ClusterPair, cluster: str, user: int) -> dict[str, int]:
    """``user``'s feed row on ``cluster``: column -> cell timestamp."""
    return dict(feeds_kind.row_cells(pair[cluster], user))
