"""The primary HBase cluster black-holed, not stopped, while feeds are read:
its Thrift servers are reached through relays that, during the fault,
keep accepting connections and forward nothing either way, so pooled
connections go silent mid-call and new ones connect into silence. Readers
on a few threads read one feed all along, with the settings' cut-off and
call timeout.

What must hold: no read fails; every page is the feed; during the fault
the standby serves, each read within the cut-off plus a margin (the
speculative read, then once the primary's threads are all waiting, reads
that skip it); after it the primary serves again.

``PINLATER_FAULT_SECONDS`` sets how long the fault lasts (the smoke run:
6 s; ``make chaos``: 30 s)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from bench.support import percentile_ms
from tasks.appdata.store import AppData
from tasks.feeds.read import FeedReader
from tasks.feeds.settings import FeedSettings
from tasks.hbase import ClusterPair, ClusterPool
from tasks.hbase.settings import Address, HBaseSettings
from tests.faults.hosts import FAULT_S
from tests.feeds.helpers import feed_of
from tests.support.topology.relay import Relay

READERS = 4
# A read waits the cut-off, then for the standby: on 2 busy cores a
# standby read takes up to a few hundred ms.
MARGIN_S = 1.5
BACK_WITHIN_S = 60.0


@dataclass
class Read:
    started: float
    latency_s: float
    served_by: str
    error: str = ""
    right: bool = True


def relayed(pool: ClusterPool, thrift1: Relay, thrift2: Relay) -> ClusterPool:
    """``pool``'s cluster through the relays, with the defaults a deployment starts from."""
    return ClusterPool.for_cluster(pool.name, Address(*thrift1.address), HBaseSettings(table_prefix=pool.table_prefix),
                                   thrift2_address=Address(*thrift2.address))


@pytest.mark.serial  # times reads
def test_feed_reads_while_the_primary_is_black_holed(appdata: AppData, pair: ClusterPair) -> None:
    follower, newest_first = feed_of(appdata, pair, 5)
    cutoff_s = FeedSettings().read_cutoff_ms / 1000
    primary = pair.primary
    assert primary.thrift2_address is not None
    with Relay((primary.address.host, primary.address.port)) as thrift1, \
            Relay((primary.thrift2_address.host, primary.thrift2_address.port)) as thrift2:
        slow = relayed(primary, thrift1, thrift2)
        reader = FeedReader(ClusterPair(slow, pair.standby), appdata, cutoff_s=cutoff_s)
        reads: list[Read] = []
        lock, stop = threading.Lock(), threading.Event()

        def read_all_along() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    page = reader.read(follower, None, 10)
                    done = Read(started, time.monotonic() - started, page.served_by,
                                right=[p.id for p in page.pins] == newest_first)
                except Exception as exc:  # noqa: BLE001 (every failure is counted and shown)
                    done = Read(started, time.monotonic() - started, "", f"{type(exc).__name__}: {exc}")
                with lock:
                    reads.append(done)
                time.sleep(0.02)

        threads = [threading.Thread(target=read_all_along, name=f"reader{i}") for i in range(READERS)]
        try:
            for thread in threads:
                thread.start()
            time.sleep(2.0)
            fault_from = time.monotonic()
            thrift1.stall()
            thrift2.stall()
            time.sleep(FAULT_S)
            fault_to = time.monotonic()
            thrift1.flow()
            thrift2.flow()
            deadline = time.monotonic() + BACK_WITHIN_S
            while time.monotonic() < deadline:
                with lock:
                    if any(r.started > fault_to and r.served_by == "primary" for r in reads):
                        break
                time.sleep(0.2)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
            reader.close()
            slow.close()

    # Reads started in the fault's last second may be answered by the
    # primary once it flows again: they are not counted as during it.
    during = [r for r in reads if fault_from <= r.started < fault_to - 1.0]
    after = [r for r in reads if r.started >= fault_to]
    errors = [r.error for r in reads if r.error]
    wrong = [r for r in reads if not r.error and not r.right]
    latencies = [r.latency_s for r in during]
    p99 = percentile_ms(latencies, 0.99) / 1000
    print(f"\nprimary black-holed {FAULT_S:g} s: {len(reads)} reads, {len(during)} during the fault "
          f"(p99 {p99 * 1000:.0f} ms, worst {percentile_ms(latencies, 1.0):.0f} ms, "
          f"{sum(r.served_by == 'standby' for r in during)} by the standby), "
          f"{len(errors)} errors, {len(wrong)} wrong pages")
    assert errors == [], errors[:5]
    assert wrong == []
    assert len(during) >= READERS * (FAULT_S - 1.0), f"only {len(during)} reads during the fault"
    assert all(r.served_by == "standby" for r in during), "a read from a black-holed cluster"
    assert p99 < cutoff_s + MARGIN_S, f"p99 {p99:.2f} s"
    assert any(r.served_by == "primary" for r in after), f"the primary did not serve within {BACK_WITHIN_S:g} s"
