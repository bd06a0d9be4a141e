"""Health of the two HBase clusters, for the dashboard's HBase panel
(``tasks.feeds.panel``).

Each cluster has two Thrift servers: Thrift1 (scans of many rows, through
happybase) and Thrift2 (every write, feed read, lookup and table change).
One thread per server asks it a cheap question every ``interval_s``
(Thrift1: list the tables, which the master answers; Thrift2: its server
type) through a pool of its own: one connection, one try, a socket timeout
of ``timeout_s``. Requests only read
the last results, so a server that is down or black-holed never slows the
dashboard: its probe thread waits out the timeout, no request does, and
neither does the probe of the cluster's other server.

Per server: ``reachable`` (None until its first probe ends), the latency of
the last probe when it answered, the last error in one line when it did
not, and when it was checked. A ``ClusterHealth`` holds its Thrift1
server's in its own fields and its Thrift2 server's in ``thrift2``. Settings
come from ``HBaseSettings`` (``PINLATER_HBASE_*``); when they cannot be read
the dashboard still starts, probes nothing, and ``settings_error`` says why
in one line.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pinlater.kit.cli_output import one_line
from tasks.hbase.errors import HBaseError
from tasks.hbase.jmx import trim_counts
from tasks.hbase.pair import PRIMARY, STANDBY, ClusterPair
from tasks.hbase.pool import ClusterPool
from tasks.hbase.settings import Address, HBaseSettings
from tasks.hbase.tables import TableDef, compaction_cap

log = logging.getLogger(__name__)

# A server slower than this to answer its probe is shown down. Local clusters
# answer in ~5 ms, but a loaded 2-core host has been seen to stall one past 1 s.
PROBE_TIMEOUT_S = 2.0
THRIFT1 = "thrift1"
THRIFT2 = "thrift2"


@dataclasses.dataclass(frozen=True, slots=True)
class ServerHealth:
    """One Thrift server of a cluster, as last probed."""

    address: str | None = None
    reachable: bool | None = None
    latency_ms: float | None = None
    error: str | None = None
    checked_at_ms: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class TrimHealth:
    """How a cluster's feed is trimmed, as last probed: ``mode`` is
    "compaction" (the table is attached to the trimming coprocessor, with
    ``cap``), "sweep" (it is not: trim jobs and the sweep do it) or None
    (unknown: ``error`` says why). The counts are the region server's since
    it started (None when its JMX could not be read or has none yet)."""

    mode: str | None = None
    cap: int | None = None
    cells_dropped: int | None = None
    rows_trimmed: int | None = None
    compactions_trimmed: int | None = None
    compactions_passed: int | None = None
    error: str | None = None
    checked_at_ms: int | None = None


def probe_trimming(pool: ClusterPool, table: TableDef) -> TrimHealth:
    """``table``'s trimming mode and the coprocessor's counts; never raises."""
    try:
        cap = compaction_cap(pool, table)
    except HBaseError as exc:
        return TrimHealth(error=one_line(exc), checked_at_ms=_now_ms())
    health = TrimHealth("sweep" if cap is None else "compaction", cap, checked_at_ms=_now_ms())
    if pool.info_address is None:
        return health
    try:
        counts = trim_counts(pool.name, pool.info_address, timeout_s=pool.call_timeout_s)
    except HBaseError as exc:
        return dataclasses.replace(health, error=one_line(exc))
    return health if counts is None else dataclasses.replace(health, **dataclasses.asdict(counts))


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterHealth:
    """A cluster: its Thrift1 server in the first fields (the panel's shape
    from before Thrift2 was probed), its Thrift2 server in ``thrift2``."""

    name: str
    address: str | None
    reachable: bool | None = None
    latency_ms: float | None = None
    error: str | None = None
    checked_at_ms: int | None = None
    thrift2: ServerHealth = dataclasses.field(default_factory=ServerHealth)
    trimming: TrimHealth = dataclasses.field(default_factory=TrimHealth)

    @classmethod
    def of(cls, name: str, thrift1: ServerHealth, thrift2: ServerHealth, trimming: TrimHealth) -> ClusterHealth:
        return cls(name, thrift1.address, thrift1.reachable, thrift1.latency_ms, thrift1.error,
                   thrift1.checked_at_ms, thrift2, trimming)


def probe_thrift1(pool: ClusterPool) -> ServerHealth:
    """One timed listing of the tables; never raises."""
    return _timed(pool.name, pool.address,
                  lambda: pool.run("list tables", lambda connection: connection.tables(), idempotent=False))


def probe_thrift2(pool: ClusterPool) -> ServerHealth:
    """One timed ``getThriftServerType()``; never raises. A new connection
    asks it first and fails in one line unless the answer is Thrift2 (a
    setting pointing at a Thrift1 port, say)."""
    thrift2 = pool.thrift2
    return _timed(pool.name, thrift2.address,
                  lambda: thrift2.run("server type", lambda client: client.getThriftServerType(), idempotent=False))


PROBES: dict[str, Callable[[ClusterPool], ServerHealth]] = {THRIFT1: probe_thrift1, THRIFT2: probe_thrift2}


def _timed(cluster: str, address: Address, call: Callable[[], object]) -> ServerHealth:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:
        if not isinstance(exc, HBaseError):  # not a cluster failure: a bug here, keep its traceback
            log.exception("HBase probe of %s (%s) failed", cluster, address)
        error = one_line(exc if isinstance(exc, HBaseError) else f"{type(exc).__name__}: {exc}")
        return ServerHealth(str(address), False, None, error, _now_ms())
    latency = round((time.monotonic() - started) * 1000, 1)
    return ServerHealth(str(address), True, latency, None, _now_ms())


def _now_ms() -> int:
    return int(time.time() * 1000)


def bounded(settings: HBaseSettings, timeout_s: float) -> HBaseSettings:
    """Tight bounds for the probe only (the feed tasks keep their own). A
    ``ClusterPool`` gives its Thrift2 pool the same limits."""
    return dataclasses.replace(settings, pool_size=1, attempts=1, pool_wait_s=timeout_s,
                               call_timeout_s=min(settings.call_timeout_s, timeout_s))


class HBaseHealth:
    """Probes both servers of both clusters in the background; ``clusters()``
    is the latest."""

    def __init__(
        self,
        settings: HBaseSettings | None,
        *,
        settings_error: str | None = None,
        interval_s: float = 2.0,
        timeout_s: float = PROBE_TIMEOUT_S,
        trimmed: TableDef | None = None,
    ) -> None:
        # The table whose compaction-time trimming is probed (the app's that
        # defines one); None: trimming is not probed.
        self.trimmed = trimmed
        self.settings_error = settings_error
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._pair: ClusterPair | None = None
        self._latest: dict[tuple[str, str], ServerHealth] = {}
        self._trimming: dict[str, TrimHealth] = {}
        if settings is not None:
            self._pair = ClusterPair.from_settings(bounded(settings, timeout_s))
            for pool in self._pair:
                self._latest[pool.name, THRIFT1] = ServerHealth(str(pool.address))
                self._latest[pool.name, THRIFT2] = ServerHealth(str(pool.thrift2.address))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> HBaseHealth:
        try:
            settings = HBaseSettings.from_env(env)
        except ValueError as exc:  # e.g. PINLATER_HBASE_PRIMARY=nonsense: the panel says so
            return cls(None, settings_error=one_line(exc), **kwargs)
        return cls(settings, **kwargs)

    def start(self) -> HBaseHealth:
        for pool in self._pair or ():
            for server, probe in PROBES.items():
                thread = threading.Thread(target=self._run, args=(pool, server, probe),
                                          name=f"dash-hbase-{pool.name}-{server}", daemon=True)
                thread.start()
                self._threads.append(thread)
            if self.trimmed is None:
                continue
            thread = threading.Thread(target=self._run_trimming, args=(pool, self.trimmed),
                                      name=f"dash-hbase-{pool.name}-trimming", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run_trimming(self, pool: ClusterPool, table: TableDef) -> None:
        # Its counts move with compactions, and JMX copies them every ~10 s.
        while True:
            health = probe_trimming(pool, table)
            with self._lock:
                self._trimming[pool.name] = health
            if self._stop.wait(max(self.interval_s, 5.0)):
                return

    def _run(self, pool: ClusterPool, server: str, probe: Callable[[ClusterPool], ServerHealth]) -> None:
        while True:
            health = probe(pool)
            with self._lock:
                self._latest[pool.name, server] = health
            if self._stop.wait(self.interval_s):
                return

    def clusters(self) -> list[ClusterHealth]:
        """Primary, then standby, as last probed."""
        with self._lock:
            return [ClusterHealth.of(name, self._server(name, THRIFT1), self._server(name, THRIFT2),
                                     self._trimming.get(name) or TrimHealth())
                    for name in (PRIMARY, STANDBY)]

    def _server(self, cluster: str, server: str) -> ServerHealth:
        return self._latest.get((cluster, server)) or ServerHealth()

    def close(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + self.timeout_s + 1  # at most one probe in flight per thread, all at once
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._pair is not None:
            self._pair.close()
