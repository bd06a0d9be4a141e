"""tasks.runtime: one store and one HBase pair per process, whichever task
packages use them; the packages' views share them, a fork makes a fresh
set, and ``close`` releases them. Nothing here connects: the settings point
at closed ports and every object is made lazily."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import tasks.backfill.runtime as backfill_runtime
import tasks.feeds.runtime as feed_runtime
import tasks.runtime as task_runtime
import tasks.typeahead.runtime as typeahead_runtime
from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair
from tasks.per_process import PerProcess
from tasks.runtime import TaskRuntime

NOWHERE = {
    "PINLATER_APPDATA_SHARDS": "0-3=mysql://nobody:nothing@127.0.0.1:1",
    "PINLATER_HBASE_PRIMARY": "127.0.0.1:1",
    "PINLATER_HBASE_STANDBY": "127.0.0.1:2",
    "PINLATER_FEED_CAP": "77",
    "PINLATER_TYPEAHEAD_RENAME_PAGE": "33",
}


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[TaskRuntime]]:
    """This process's runtime comes from ``NOWHERE``; every one made is listed."""
    runtimes: list[TaskRuntime] = []

    def make() -> TaskRuntime:
        runtimes.append(TaskRuntime.from_env(NOWHERE))
        return runtimes[-1]

    monkeypatch.setattr(task_runtime, "_current", PerProcess(make))
    yield runtimes


def test_the_task_packages_share_one_store_and_one_pair(made: list[TaskRuntime]) -> None:
    feeds, typeahead, backfill = feed_runtime.runtime(), typeahead_runtime.runtime(), backfill_runtime.runtime()
    assert len(made) == 1
    shared = made[0]
    assert task_runtime.current() is shared
    assert feeds.store is typeahead.store is backfill.ctx.store is backfill.records.store is shared.store
    assert feeds.pair is typeahead.pair is backfill.ctx.pair is shared.pair
    assert str(shared.pair.primary.address) == "127.0.0.1:1"
    # Each view is made once, with its own settings from the runtime's environment.
    assert feed_runtime.runtime() is feeds and typeahead_runtime.runtime() is typeahead
    assert backfill_runtime.runtime() is backfill
    assert feeds.settings.cap == 77 and typeahead.settings.rename_page == 33
    assert backfill.ctx.env is NOWHERE
    # What a package ensures stays its own: each checks its own definitions.
    assert len({id(feeds.tables), id(typeahead.tables), id(backfill.ctx.tables)}) == 3


def test_a_given_runtime_has_views_of_its_own_and_can_stand_in(made: list[TaskRuntime]) -> None:
    ours = feed_runtime.runtime()
    other = TaskRuntime.from_env(NOWHERE)  # what a harness makes on its own stores
    assert feed_runtime.runtime(other) is feed_runtime.runtime(other) is not ours
    assert feed_runtime.runtime(other).pair is other.pair is not ours.pair
    with task_runtime.replaced(other):
        assert task_runtime.current() is other
        assert typeahead_runtime.runtime().pair is other.pair
    assert task_runtime.current() is made[0] and feed_runtime.runtime() is ours
    assert len(made) == 1


def test_a_fork_makes_a_fresh_set_and_leaves_the_parents_alone(made: list[TaskRuntime]) -> None:
    parent = feed_runtime.runtime()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(read)
        problems = []
        if task_runtime._current.discard() is not None:
            problems.append("the parent's runtime was handed back to be closed")
        feeds, backfill = feed_runtime.runtime(), backfill_runtime.runtime()
        if feeds is parent or feeds.store is parent.store or feeds.pair is parent.pair:
            problems.append("the child uses the parent's store or pair")
        if backfill.ctx.store is not feeds.store or backfill.ctx.pair is not feeds.pair:
            problems.append("the child's views do not share its store and pair")
        os.write(write, ("; ".join(problems) or "ok").encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    os.waitpid(child, 0)
    assert report == "ok"
    assert feed_runtime.runtime() is parent  # the parent's is still its own


def test_close_releases_the_store_and_pair_and_the_next_use_makes_new_ones(
    made: list[TaskRuntime], monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[object] = []
    monkeypatch.setattr(AppData, "close", lambda self: closed.append(self))
    monkeypatch.setattr(ClusterPair, "close", lambda self: closed.append(self))
    task_runtime.close()  # none made yet: nothing to close
    assert closed == [] and made == []
    first = feed_runtime.runtime()
    task_runtime.close()
    assert closed == [first.store, first.pair]
    again = feed_runtime.runtime()
    assert len(made) == 2
    assert again is not first and again.store is not first.store and again.pair is not first.pair
    assert typeahead_runtime.runtime().pair is again.pair
