"""Health of the two HBase clusters, for the dashboard's HBase panel.

One thread per cluster lists the tables (a cheap call the master answers)
every ``interval_s`` through a pool of its own: one connection, one try, a
socket timeout of ``timeout_s``. Requests only read the last result, so a
cluster that is down or black-holed never slows the dashboard: its probe
thread waits out the timeout, no request does.

Per cluster: ``reachable`` (None until the first probe ends), the latency
of the last probe when it answered, the last error in one line when it did
not, and when it was checked. Settings come from ``HBaseSettings``
(``PINLATER_HBASE_*``); when they cannot be read the dashboard still
starts, probes nothing, and ``settings_error`` says why in one line.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from tasks.hbase import PRIMARY, STANDBY, ClusterPair, ClusterPool, HBaseError, HBaseSettings
from tasks.hbase.errors import one_line

log = logging.getLogger(__name__)

# A cluster slower than this to list its tables is shown down. Local clusters
# answer in ~5 ms, but a loaded 2-core host has been seen to stall one past 1 s.
PROBE_TIMEOUT_S = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterHealth:
    name: str
    address: str | None
    reachable: bool | None = None
    latency_ms: float | None = None
    error: str | None = None
    checked_at_ms: int | None = None


def probe(pool: ClusterPool) -> ClusterHealth:
    """One timed listing of the tables; never raises."""
    started = time.monotonic()
    try:
        pool.run("list tables", lambda connection: connection.tables(), idempotent=False)
    except Exception as exc:
        if not isinstance(exc, HBaseError):  # not a cluster failure: a bug here, keep its traceback
            log.exception("HBase probe of %s failed", pool.name)
        error = one_line(exc if isinstance(exc, HBaseError) else f"{type(exc).__name__}: {exc}")
        return ClusterHealth(pool.name, str(pool.address), False, None, error, _now_ms())
    latency = round((time.monotonic() - started) * 1000, 1)
    return ClusterHealth(pool.name, str(pool.address), True, latency, None, _now_ms())


def _now_ms() -> int:
    return int(time.time() * 1000)


class HBaseHealth:
    """Probes both clusters in the background; ``clusters()`` is the latest."""

    def __init__(
        self,
        settings: HBaseSettings | None,
        *,
        settings_error: str | None = None,
        interval_s: float = 2.0,
        timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self.settings_error = settings_error
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._pair: ClusterPair | None = None
        self._latest: dict[str, ClusterHealth] = {}
        if settings is not None:
            # Tight bounds for the probe only: the feed tasks keep their own.
            bounded = dataclasses.replace(settings, pool_size=1, attempts=1, pool_wait_s=timeout_s,
                                          call_timeout_s=min(settings.call_timeout_s, timeout_s))
            self._pair = ClusterPair.from_settings(bounded)
            self._latest = {pool.name: ClusterHealth(pool.name, str(pool.address)) for pool in self._pair}
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
            thread = threading.Thread(target=self._run, args=(pool,), name=f"dash-hbase-{pool.name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _run(self, pool: ClusterPool) -> None:
        while True:
            health = probe(pool)
            with self._lock:
                self._latest[pool.name] = health
            if self._stop.wait(self.interval_s):
                return

    def clusters(self) -> list[ClusterHealth]:
        """Primary, then standby, as last probed."""
        with self._lock:
            return [self._latest.get(name) or ClusterHealth(name, None) for name in (PRIMARY, STANDBY)]

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 1)  # at most one probe in flight, bounded by its timeout
        if self._pair is not None:
            self._pair.close()
