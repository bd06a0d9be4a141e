"""The connections to one HBase cluster: Thrift1 through happybase (reads)
and Thrift2 (``ClusterPool.thrift2``: writes, versioned reads, table changes).

Wraps happybase's ``ConnectionPool``: a call that breaks a connection gets
that connection replaced by the pool and re-raised; ``ClusterPool.run`` then
retries the call (every write here carries an explicit cell timestamp, so a
replay is harmless) and turns what still fails into an ``HBaseError``. Every
socket has a timeout, so a stuck call cannot hang a worker, and waiting for a
free connection is bounded too. The Thrift2 pool (``tasks.hbase.thrift2``)
behaves the same way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import happybase

from tasks.hbase.errors import translate, with_retries
from tasks.hbase.settings import Address, Addresses, HBaseSettings
from tasks.hbase.spans import traced
from tasks.hbase.thrift2 import PoolLimits, Thrift2Pool, under_deadline

T = TypeVar("T")


class ClusterPool:
    def __init__(
        self,
        name: str,
        address: Address,
        *,
        size: int = 4,
        call_timeout_s: float = 10.0,
        pool_wait_s: float = 5.0,
        attempts: int = 2,
        table_prefix: str = "",
        thrift2_address: Address | None = None,
        info_address: Addresses | None = None,
    ) -> None:
        self.name = name
        self.info_address = info_address  # the region servers' web servers (JMX)
        self.address = address
        self.size = size
        self.call_timeout_s = call_timeout_s
        self.pool_wait_s = pool_wait_s
        self.attempts = attempts
        self.table_prefix = table_prefix
        self._lock = threading.Lock()
        self._pool: Any = None  # happybase.ConnectionPool, made on first use
        self.thrift2_address = thrift2_address
        limits = PoolLimits(size, call_timeout_s, pool_wait_s, attempts)
        self._thrift2 = None if thrift2_address is None else Thrift2Pool(name, thrift2_address, limits)

    @classmethod
    def for_cluster(
        cls, name: str, address: Address, settings: HBaseSettings, thrift2_address: Address | None = None,
        info_address: Addresses | None = None,
    ) -> ClusterPool:
        return cls(
            name,
            address,
            size=settings.pool_size,
            call_timeout_s=settings.call_timeout_s,
            pool_wait_s=settings.pool_wait_s,
            attempts=settings.attempts,
            table_prefix=settings.table_prefix,
            thrift2_address=thrift2_address,
            info_address=info_address,
        )

    @property
    def thrift2(self) -> Thrift2Pool:
        """The cluster's Thrift2 pool (``ValueError`` if it has no Thrift2
        address: a pool made by hand for reads only)."""
        if self._thrift2 is None:
            raise ValueError(f"hbase {self.name} ({self.address}): no Thrift2 address given for this cluster")
        return self._thrift2

    def __repr__(self) -> str:
        return f"ClusterPool({self.name!r}, {self.address})"

    def table_name(self, name: str) -> str:
        """The name a table has on the cluster (happybase adds the prefix
        itself; Thrift2 calls need it spelled out)."""
        return f"{self.table_prefix}_{name}" if self.table_prefix else name

    def _happybase_pool(self) -> Any:
        # happybase opens one connection when the pool is made, so a cluster
        # that is down fails here: the pool is made again on the next call.
        with self._lock:
            if self._pool is None:
                self._pool = happybase.ConnectionPool(
                    self.size,
                    host=self.address.host,
                    port=self.address.port,
                    timeout=int(self.call_timeout_s * 1000),  # ms; thriftpy2 uses it to connect too
                    table_prefix=self.table_prefix or None,
                )
            return self._pool

    def _once(self, operation: str, fn: Callable[[Any], T]) -> T:
        try:
            with self._happybase_pool().connection(timeout=self.pool_wait_s) as connection:
                return fn(connection)
        except Exception as exc:
            error = translate(exc, self.name, str(self.address), operation)
            if error is None:
                raise
            raise error from exc

    def run(self, operation: str, fn: Callable[[Any], T], *, idempotent: bool = True) -> T:
        """Call ``fn(connection)`` with a pooled happybase connection.

        ``fn`` must finish its work inside (consume scans: happybase's scan is
        a generator that talks to the server while it is iterated). A broken
        connection is retried up to ``attempts`` times if the call is
        idempotent; whatever still fails raises an ``HBaseError`` naming the
        cluster, the operation and the cause.

        Refused inside ``within``: happybase's calls wait out the pool's
        timeouts whatever a caller's deadline, so such a caller (a lookup
        that moves to the standby) reads through Thrift2.
        """
        if under_deadline():
            raise RuntimeError(f"hbase {self.name}: {operation} goes through Thrift1, "
                               "which cannot keep its caller's deadline (within): read through Thrift2")
        return traced(self.name, operation, "thrift1",
                      lambda: with_retries(self.attempts if idempotent else 1, lambda: self._once(operation, fn)))

    def close(self) -> None:
        """Close the idle connections of both pools (those in use close when
        returned and dropped)."""
        if self._thrift2 is not None:
            self._thrift2.close()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        # happybase keeps idle connections there and has no call that closes
        # them. Checked against happybase 1.3 (tests/unit/test_third_party_guards.py).
        idle: queue.Queue[Any] = pool._queue
        while True:
            try:
                idle.get_nowait().close()
            except queue.Empty:
                return
