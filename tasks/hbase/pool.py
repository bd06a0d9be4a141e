"""A pool of Thrift connections to one HBase cluster.

Wraps happybase's ``ConnectionPool``: a call that breaks a connection gets
that connection replaced by the pool and re-raised; ``ClusterPool.run`` then
retries the call (every write here carries an explicit cell timestamp, so a
replay is harmless) and turns what still fails into an ``HBaseError``. Every
socket has a timeout, so a stuck call cannot hang a worker, and waiting for a
free connection is bounded too.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import happybase
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from tasks.hbase.errors import HBaseUnavailable, translate
from tasks.hbase.settings import Address, HBaseSettings

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
    ) -> None:
        self.name = name
        self.address = address
        self.size = size
        self.call_timeout_s = call_timeout_s
        self.pool_wait_s = pool_wait_s
        self.attempts = attempts
        self.table_prefix = table_prefix
        self._lock = threading.Lock()
        self._pool: Any = None  # happybase.ConnectionPool, made on first use

    @classmethod
    def for_cluster(cls, name: str, address: Address, settings: HBaseSettings) -> ClusterPool:
        return cls(
            name,
            address,
            size=settings.pool_size,
            call_timeout_s=settings.call_timeout_s,
            pool_wait_s=settings.pool_wait_s,
            attempts=settings.attempts,
            table_prefix=settings.table_prefix,
        )

    def __repr__(self) -> str:
        return f"ClusterPool({self.name!r}, {self.address})"

    def table_name(self, name: str) -> str:
        """The name a table has on the cluster (happybase adds the prefix itself)."""
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
        """
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts if idempotent else 1),
            wait=wait_fixed(0.05),
            retry=retry_if_exception_type(HBaseUnavailable),
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._once(operation, fn)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    def close(self) -> None:
        """Close the idle connections (those in use close when returned and dropped)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        idle: queue.Queue[Any] = pool._queue  # happybase keeps idle connections there
        while True:
            try:
                idle.get_nowait().close()
            except queue.Empty:
                return
