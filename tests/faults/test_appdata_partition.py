"""MariaDB (the app data) cut off from the workers while the application
keeps acting: the workers reach it through a user-space relay that, during
the fault, accepts connections and forwards nothing, so their queries hang
until the socket timeout and their jobs fail as outages and are retried.
The application reaches MariaDB directly all along and keeps pinning,
following and unfollowing.

The ledger at the end is the oracle of the consistency model, computed from
MySQL alone: every (pin, follow) cell the truth says each feed must hold,
on both clusters, at its follow's version, and nothing else; every
typeahead entry of every user. 0 missing, 0 extra, no job failed for good.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

import random
import time

import pytest

from tasks.appdata import graph
from tasks.appdata.settings import TIMEOUT_VAR
from tasks.typeahead.settings import TypeaheadSettings
from tests.consistency import oracle
from tests.faults.hosts import FAULT_S
from tests.feeds.world import FeedWorld
from tests.servers import MYSQL
from tests.support.appdata import SHARDS
from tests.support.topology.relay import Relay

USERS = 12
PACE_S = 0.05  # between two actions of the application


def mysql_address() -> tuple[str, int]:
    host, port = MYSQL.rsplit("@", 1)[1].rsplit(":", 1)
    return host, int(port)


@pytest.mark.serial  # a fault that lasts: kept off the busy parallel tier
def test_feeds_and_indexes_equal_their_truth_after_the_app_data_is_cut_off(world: FeedWorld) -> None:
    store, rng = world.store, random.Random(46)
    users = [graph.create_user(store, {"name": f"Partition User{i}"}).id for i in range(USERS)]
    owner = {graph.create_board(store, u, {"name": "b"}).id: u for u in users[: USERS // 2]}
    boards = list(owner)
    host, port = mysql_address()
    actions = {"pins": 0, "follows": 0, "unfollows": 0}

    def act_for(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            a, b = rng.sample(users, 2)
            board, roll = rng.choice(boards), rng.random()
            if roll < 0.4:
                world.actions.create_pin(owner[board], board, {"title": "p"})
                actions["pins"] += 1
            elif roll < 0.6:
                world.contacts.follow(a, b)
                actions["follows"] += 1
            elif roll < 0.8:
                world.actions.follow(a, board)
                actions["follows"] += 1
            else:
                followed = [f for f in (b, *boards) if graph.follow_time(store, a, f) is not None]
                if followed:
                    gone = rng.choice(followed)
                    (world.contacts.unfollow if gone == b else world.actions.unfollow)(a, gone)
                    actions["unfollows"] += 1
            time.sleep(PACE_S)

    with Relay((host, port)) as relay:
        relayed = SHARDS.replace(f"{host}:{port}", f"{relay.address[0]}:{relay.address[1]}")
        assert relayed != SHARDS
        world.start_workers(2, 2, env={"PINLATER_APPDATA_SHARDS": relayed, TIMEOUT_VAR: "5"})
        act_for(2.0)
        relay.stall()
        act_for(FAULT_S)
        backlog = world.busy()  # what the fault held up
        relay.flow()
        act_for(2.0)
        world.settle(180 + 4 * FAULT_S, "the jobs to finish after the app data came back")

    recent = world.actions.settings.recent_pins
    found = oracle.feed_differences(store, world.pair, users, recent)
    t = TypeaheadSettings()
    found += oracle.index_differences(store, world.pair, users, users,
                                      (t.second_followees, t.second_per_followee, t.second_cap))
    cells = sum(len(oracle.expected_feed(store, u, recent)) for u in users)
    print(f"\napp data cut off {FAULT_S:g} s: {actions}; {backlog} jobs held up; "
          f"{cells} (pin, follow) cells expected on each cluster; {len(found)} differences")
    assert found == [], "\n".join(found[:20])
    assert world.failed_jobs() == {}
    assert backlog > 0, "the fault held nothing up: the workers did not go through the relay"
    assert cells > 0
