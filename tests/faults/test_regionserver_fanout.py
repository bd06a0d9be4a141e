"""A region server SIGKILLed, or paused for 60 s, in the middle of a
fan-out. The primary is the ``chaos`` cluster on HDFS
(``PINLATER_HBASE_FS=hdfs scripts/hbase up chaos``: ZooKeeper, a master,
three region servers, a NameNode and a DataNode beside each region server,
as JVMs of their own), whose feed table is split a region per shard over
its servers; the standby is the tests' own. Workers fan a pin out to the
followers of an account with thousands of them, in pages; after the first
pages land, the region server holding the most feed regions and not
``hbase:meta``, or the one with it, is SIGKILLed, or the one without it is
paused with its DataNode (a hung host). Its ZooKeeper session expires, the
master recovers the lease of its WAL and reassigns its regions, and the
feed writes that failed meanwhile are retried. A paused one is woken after
60 s, when its regions are long served elsewhere: it must stop itself
without a write of its own landing.

The ledger: the pin's cell in the row of every follower, exactly once, on
both clusters, and in no other row; no job failed for good. ``make chaos``
runs it; ``make test`` runs the recovery benchmark's smoke instead.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.rpc import make_client

from bench.recovery import PAUSE_S, THRIFT2_PORT, hbase, meta_server, wait_gone, wait_hdfs_healthy, wait_registered
from tasks.appdata import generate, graph
from tasks.appdata.generate import GraphSpec
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tasks.feeds.cells import TABLE, qualifier
from tasks.hbase import ClusterPair, ClusterPool, ensure_tables
from tasks.hbase.idl import THRIFT2
from tasks.hbase.settings import Address
from tasks.hbase.tables import installed_tables
from tests.feeds.helpers import all_followers, rows_with_column
from tests.feeds.world import feed_world

CHAOS_THRIFT, CHAOS_THRIFT2, CHAOS_RS_PORT = 19094, THRIFT2_PORT, 16320  # scripts/hbase's chaos cluster
FOLLOWERS = 3000
PAGE = 100
CASES = ["without_meta", "with_meta", "paused"]
Server = tuple[int, int]  # (port, start code)


def _client() -> Any:
    return make_client(THRIFT2.THBaseService, "127.0.0.1", CHAOS_THRIFT2, timeout=30_000)


def regions_by_server(table: bytes) -> dict[Server, int]:
    client = _client()
    try:
        out: dict[Server, int] = {}
        for location in client.getAllRegionLocations(table):
            server = (location.serverName.port, location.serverName.startCode)
            out[server] = out.get(server, 0) + 1
        return out
    finally:
        client.close()


@pytest.fixture(scope="module")
def chaos_pair(pair: ClusterPair) -> Iterator[ClusterPair]:
    hbase("up", "chaos", fs="hdfs")
    chaos = ClusterPool("primary", Address("127.0.0.1", CHAOS_THRIFT), call_timeout_s=20.0,
                        table_prefix=pair.primary.table_prefix, thrift2_address=Address("127.0.0.1", CHAOS_THRIFT2))
    made = ClusterPair(chaos, pair.standby)
    try:
        ensure_tables(made, installed_tables())
        yield made
    finally:
        chaos.close()
        hbase("down", "chaos")


@pytest.mark.serial
@pytest.mark.chaos  # about 2 minutes a case, with a distributed cluster of its own
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", CASES)
def test_a_fanout_survives_a_region_server_killed_midway(
    case: str, servers: None, appdata: AppData, chaos_pair: ClusterPair, tmp_path: Path
) -> None:
    wait_registered()
    wait_hdfs_healthy()
    table = chaos_pair.primary.table_name(TABLE).encode()
    placed = regions_by_server(table)
    client = _client()
    try:
        meta = meta_server(client)
    finally:
        client.close()
    candidates = [meta] if case == "with_meta" else [s for s in placed if s != meta]
    assert candidates, f"no region server fits {case}: feed regions {placed}, meta on {meta}"
    victim = max(candidates, key=lambda s: placed.get(s, 0))
    assert placed.get(victim, 0) >= 1, f"the victim {victim} holds no feed region: {placed}"
    number = str(victim[0] - CHAOS_RS_PORT)
    env = {"PINLATER_HBASE_PRIMARY": f"127.0.0.1:{CHAOS_THRIFT}",
           "PINLATER_HBASE_PRIMARY_THRIFT2": f"127.0.0.1:{CHAOS_THRIFT2}"}
    spec = GraphSpec(users=FOLLOWERS + 200, boards=10, pins=0, follows_per_user=0.1, board_follows_per_user=0,
                     celebrities=1, celebrity_followers=FOLLOWERS, seed=46 + CASES.index(case))
    celebrity = generate.generate(appdata, spec).celebrity_ids[0]
    board = graph.create_board(appdata, celebrity, {"name": "chaos"}).id
    with feed_world("redis", None, appdata, chaos_pair, tmp_path, extra_env=env, page_size=PAGE) as world:
        world.start_workers(2, 2)
        pin = world.actions.create_pin(celebrity, board, {"title": "through a region server's death"})
        column = qualifier(pin.created_at_ms, pin.id)
        # A few pages written on the primary, then the kill.
        pages = -(-FOLLOWERS // PAGE)
        deadline = time.monotonic() + 120
        while world.counts()[queues.FANOUT]["succeeded"] < 3:
            assert time.monotonic() < deadline, f"no fan-out page in 120 s: {world.counts()}"
            time.sleep(0.1)
        pages_before = world.counts()[queues.FANOUT]["succeeded"]
        fault = "pause" if case == "paused" else "kill"
        hbase("rs", "chaos", fault, number)
        killed = time.monotonic()
        try:
            if fault == "pause":
                # Settles while it sleeps (recovery takes 15-25 s here); woken,
                # it finds itself dead and stops.
                world.settle(PAUSE_S - 5, f"the fan-out while rs{number} is paused")
                settled_s = time.monotonic() - killed
                time.sleep(max(0.0, killed + PAUSE_S - time.monotonic()))
                hbase("rs", "chaos", "resume", number)
                wait_gone(number)
                world.settle(60, "anything the woken region server set off")
            else:
                world.settle(300, f"the fan-out after rs{number} was killed")
                settled_s = time.monotonic() - killed
            assert world.failed_jobs() == {}
            reached = {side: rows_with_column(chaos_pair, side, column) for side in ("primary", "standby")}
        finally:
            if fault == "pause":
                with contextlib.suppress(SystemExit):  # woken already, and gone
                    hbase("rs", "chaos", "resume", number)
            hbase("rs", "chaos", "start", number)
    expected = set(all_followers(appdata, celebrity))
    assert len(expected) >= FOLLOWERS
    for side, rows in reached.items():
        assert set(rows) == expected, f"{side}: {len(set(rows) - expected)} extra, {len(expected - set(rows))} missing"
        assert set(rows.values()) == {1}, f"{side}: a pin stored twice in a row"
    done = f"paused {PAUSE_S} s" if case == "paused" else "SIGKILLed"
    print(f"\n{case}: rs{number} ({placed[victim]} feed regions) {done} after {pages_before} of {pages} "
          f"fan-out pages; the rest settled {settled_s:.1f} s later; {len(expected)} followers reached once "
          f"on both clusters")

