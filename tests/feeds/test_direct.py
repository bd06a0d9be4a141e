"""A fan-out page's own puts (``tasks.feeds.direct``) on the real servers:
both clusters written and fenced once, a cluster that never answers left
to its write job within the deadline; and the choice between a direct put
and a write job, which follows the write queue's state and a cluster's
recent failures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pinlater.errors import PinLaterError
from pinlater.queue_config import QueueConfig
from tasks.appdata import graph
from tasks.appdata.ids import ObjectType, make_id
from tasks.appdata.store import AppData
from tasks.feeds import direct, queues
from tasks.feeds.cells import qualifier
from tasks.feeds.direct import DirectWrites, put_all
from tasks.feeds.fanout import FanoutJob, fanout_page
from tasks.feeds.writes import WriteBody
from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool
from tasks.hbase.settings import Address
from tests.feeds.helpers import feed, pin, silent_port, tick, user


@pytest.fixture
def black_hole() -> Iterator[Address]:
    with silent_port() as address:
        yield address


def page_of(store: AppData, fans: int) -> tuple[int, list[int], int, list[WriteBody]]:
    """A pinner with ``fans`` followers, a new pin, and its one page's writes."""
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    followers = [user(store, f"fan{i}") for i in range(fans)]
    for follower in followers:
        graph.follow_user(store, follower, pinner, at_ms=tick())
    created = tick()
    new = pin(store, pinner, board, created)
    step = fanout_page(store, FanoutJob(new.id, pinner, board, created))
    assert [w.cluster for w in step.writes] == [PRIMARY, STANDBY]
    return pinner, followers, new.id, step.writes


def test_a_pages_puts_reach_both_clusters_and_one_fence_retracts_a_follow_gone_meanwhile(
    appdata: AppData, pair: ClusterPair
) -> None:
    pinner, fans, pin_id, writes = page_of(appdata, 4)
    graph.unfollow_user(appdata, fans[0], pinner)  # after the page read it, before its puts
    done, failed = put_all(lambda _cluster: pair, appdata, writes, 5.0)
    assert (done, failed) == ({PRIMARY, STANDBY}, set())
    for cluster in (PRIMARY, STANDBY):
        assert feed(pair, cluster, fans[0]) == [], cluster
        assert [feed(pair, cluster, fan) for fan in fans[1:]] == [[pin_id]] * 3, cluster


def test_a_cluster_that_never_answers_is_left_to_its_write_job_within_the_deadline(
    appdata: AppData, pair: ClusterPair, black_hole: Address
) -> None:
    _pinner, fans, pin_id, writes = page_of(appdata, 3)
    hung = ClusterPool(STANDBY, black_hole, thrift2_address=black_hole, call_timeout_s=30.0, attempts=1,
                       table_prefix=pair.standby.table_prefix)
    half = ClusterPair(pair.primary, hung)
    started = time.monotonic()
    done, failed = put_all(lambda _cluster: half, appdata, writes, 0.5)
    took = time.monotonic() - started
    hung.close()
    assert (done, failed) == ({PRIMARY}, {STANDBY})
    assert took < 5.0, f"the hung cluster held the page {took:.1f} s past a 0.5 s deadline"
    assert [feed(pair, PRIMARY, fan) for fan in fans] == [[pin_id]] * 3


def test_put_all_refuses_bodies_that_are_not_the_same_put_once_per_cluster(appdata: AppData, pair: ClusterPair) -> None:
    _pinner, _fans, _pin_id, writes = page_of(appdata, 2)
    other = replace(writes[1], rows=writes[1].rows[:1])
    for bodies in ([writes[0], other], [writes[0], writes[0]]):
        with pytest.raises(ValueError, match="the same put"):
            put_all(lambda _cluster: pair, appdata, bodies, 1.0)


class QueueState:
    """A job-service client as far as the choice reads it: each write
    queue's config and pending count, and the calls made."""

    def __init__(self) -> None:
        self.configs = {name: QueueConfig(name=name) for name in queues.WRITE.values()}
        self.pending = dict.fromkeys(queues.WRITE.values(), 0)
        self.calls = 0
        self.broken = False

    def queue_config(self, name: str) -> QueueConfig:
        self.calls += 1
        if self.broken:
            raise PinLaterError("the job service is away")
        return self.configs[name]

    def count(self, name: str, state: str) -> int:
        assert state == "pending"
        return self.pending[name]


@dataclass
class Puts:
    """The clusters each direct ``put_all`` was asked for (it writes
    nothing here); those in ``failing`` fail."""

    calls: list[tuple[str, ...]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def __call__(self, _ready: object, _store: object, writes: list[WriteBody], _deadline: float
                 ) -> tuple[set[str], set[str]]:
        clusters = tuple(w.cluster for w in writes)
        self.calls.append(clusters)
        return set(clusters) - self.failing, set(clusters) & self.failing


@pytest.fixture
def chosen(monkeypatch: pytest.MonkeyPatch) -> Puts:
    puts = Puts()
    monkeypatch.setattr(direct, "put_all", puts)
    monkeypatch.setattr(direct, "QUEUE_CHECK_S", 0.0)  # every page reads the queue's state afresh
    return puts


def _writes() -> list[WriteBody]:
    column = qualifier(1_700_000_000_000, make_id(3, ObjectType.PIN, 42)).decode()
    follower, followee = make_id(1, ObjectType.USER, 7), make_id(2, ObjectType.USER, 9)
    return [WriteBody("put", cluster, followee, ((follower, 5),), (column,)) for cluster in (PRIMARY, STANDBY)]


def _left(choice: DirectWrites, client: QueueState) -> list[str]:
    """The clusters ``choice`` left to write jobs (its puts go to ``chosen``)."""
    no_pair: Any = None
    state: Any = client
    return [w.cluster for w in choice.write(lambda _c: no_pair, no_pair, state, _writes())]


def test_a_page_queues_writes_while_their_queue_is_paused_limited_or_backed_up(chosen: Puts) -> None:
    client, choice = QueueState(), DirectWrites(1.0)
    assert _left(choice, client) == [] and chosen.calls == [(PRIMARY, STANDBY)]
    primary = queues.WRITE[PRIMARY]
    for change in ({"paused": True}, {"max_dequeue_rate": 5.0}):
        client.configs[primary] = replace(QueueConfig(name=primary), **change)
        assert _left(choice, client) == [PRIMARY], change
        assert chosen.calls[-1] == (STANDBY,)
    client.configs[primary] = QueueConfig(name=primary)
    client.pending[primary] = 1
    assert _left(choice, client) == [PRIMARY]
    client.pending[primary] = 0
    assert _left(choice, client) == [] and chosen.calls[-1] == (PRIMARY, STANDBY)
    # A job service that cannot say: every write through its queue.
    client.broken = True
    calls = len(chosen.calls)
    assert _left(choice, client) == [PRIMARY, STANDBY] and len(chosen.calls) == calls
    # Off: no state read, no direct put.
    client.broken, reads = False, client.calls
    assert _left(DirectWrites(0.0), client) == [PRIMARY, STANDBY] and client.calls == reads


def test_a_cluster_that_failed_gets_write_jobs_until_its_backoff_ends(chosen: Puts) -> None:
    now = [100.0]
    client, choice = QueueState(), DirectWrites(1.0, clock=lambda: now[0])
    chosen.failing.add(STANDBY)
    assert _left(choice, client) == [STANDBY]
    chosen.failing.clear()
    assert _left(choice, client) == [STANDBY] and chosen.calls[-1] == (PRIMARY,)  # not tried while backing off
    now[0] += direct.BACKOFF_S - 1
    assert _left(choice, client) == [STANDBY]
    now[0] += 1
    assert _left(choice, client) == [] and list(chosen.calls[-1]) == [PRIMARY, STANDBY]
