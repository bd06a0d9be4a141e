"""What the black-hole tests of HBase reads share: the primary's Thrift
servers reached through user-space relays that, during the fault, keep
accepting connections and forward nothing either way (pooled connections
go silent mid-call, new ones connect into silence), and readers on threads
of their own reading all along, before, during and after it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from bench.support import percentile_ms
from tasks.hbase import ClusterPool
from tests.faults.hosts import FAULT_S
from tests.support.hbase import relayed
from tests.support.topology.relay import Relay

BACK_WITHIN_S = 60.0
STEADY_S = 2.0

# A read: the cluster that answered and whether the answer was right.
Ask = Callable[[], tuple[str, bool]]


@dataclass
class Read:
    via: str
    started: float
    latency_s: float
    served_by: str
    error: str = ""
    right: bool = True


@dataclass
class Outcome:
    reads: list[Read] = field(default_factory=list)
    fault_from: float = 0.0
    fault_to: float = 0.0

    @property
    def during(self) -> list[Read]:
        """Reads started in the fault, but for its last second (those may be
        answered by the primary once it flows again)."""
        return [r for r in self.reads if self.fault_from <= r.started < self.fault_to - 1.0]

    @property
    def after(self) -> list[Read]:
        return [r for r in self.reads if r.started >= self.fault_to]

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.reads if r.error]

    @property
    def wrong(self) -> list[Read]:
        return [r for r in self.reads if not r.error and not r.right]

    def p99_s(self) -> float:
        return percentile_ms([r.latency_s for r in self.during], 0.99) / 1000

    def summary(self, what: str) -> str:
        during = self.during
        return (f"primary black-holed {FAULT_S:g} s: {len(self.reads)} {what}, {len(during)} during the fault "
                f"(p99 {self.p99_s() * 1000:.0f} ms, worst {percentile_ms([r.latency_s for r in during], 1.0):.0f}"
                f" ms, {sum(r.served_by == 'standby' for r in during)} by the standby), "
                f"{len(self.errors)} errors, {len(self.wrong)} wrong")


class BlackHole:
    """``pool``: the primary through the relays, for the readers to use."""

    def __init__(self, primary: ClusterPool) -> None:
        assert primary.thrift2_address is not None
        self._thrift1 = Relay((primary.address.host, primary.address.port))
        self._thrift2 = Relay((primary.thrift2_address.host, primary.thrift2_address.port))
        self._primary = primary
        self.pool: ClusterPool | None = None

    def __enter__(self) -> BlackHole:
        self._thrift1.__enter__()
        self._thrift2.__enter__()
        self.pool = relayed(self._primary, self._thrift1, self._thrift2)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.pool is not None:
            self.pool.close()
        self._thrift2.__exit__(kind, error, trace)
        self._thrift1.__exit__(kind, error, trace)

    def run(self, readers: Sequence[tuple[str, Ask]], beside: Sequence[Callable[[threading.Event], None]] = ()
            ) -> Outcome:
        """Each reader on a thread of its own, reading all along: STEADY_S,
        then the fault for FAULT_S, then until every reader has had an
        answer of the primary (at most BACK_WITHIN_S). Each of ``beside``
        runs on a thread of its own from the fault's start, told by its
        event when the fault is over."""
        outcome, guard, stop, over = Outcome(), threading.Lock(), threading.Event(), threading.Event()

        def read_all_along(via: str, ask: Ask) -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    served_by, right = ask()
                    done = Read(via, started, time.monotonic() - started, served_by, right=right)
                except Exception as exc:  # noqa: BLE001 (every failure is counted and shown)
                    done = Read(via, started, time.monotonic() - started, "", f"{type(exc).__name__}: {exc}")
                with guard:
                    outcome.reads.append(done)
                time.sleep(0.02)

        threads = [threading.Thread(target=read_all_along, args=reader, name=f"reader{i}")
                   for i, reader in enumerate(readers)]
        others = [threading.Thread(target=work, args=(over,), name=f"beside{i}") for i, work in enumerate(beside)]
        vias = {via for via, _ in readers}
        try:
            for thread in threads:
                thread.start()
            time.sleep(STEADY_S)
            outcome.fault_from = time.monotonic()
            self._thrift1.stall()
            self._thrift2.stall()
            for thread in others:
                thread.start()
            time.sleep(FAULT_S)
            outcome.fault_to = time.monotonic()
            over.set()
            self._thrift1.flow()
            self._thrift2.flow()
            deadline = time.monotonic() + BACK_WITHIN_S
            while time.monotonic() < deadline:
                with guard:
                    if {r.via for r in outcome.after if r.served_by == "primary"} == vias:
                        break
                time.sleep(0.2)
        finally:
            stop.set()
            over.set()
            for thread in threads + others:
                if thread.is_alive():
                    thread.join(30)
        return outcome
