"""The control store in MySQL (MariaDB): queue configs as JSON rows, and rate
buckets refilled and taken from atomically on the server's clock."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from pinlater.control.counter_store import MySQLCounterMixin
from pinlater.control.idempotency_store import MySQLIdempotencyMixin
from pinlater.errors import ShardConnectionFailed
from pinlater.kit.sqlblocks import sql
from pinlater.queue_config import QueueConfig, read_stored_config, read_stored_configs
from pinlater.storage.errors import run_creating_missing_tables
from pinlater.storage.layout import check_mysql_layout
from pinlater.storage.migrations import MYSQL_CONTROL
from pinlater.storage.mysql_pool import ConnectionPool, MySQLAddress, MySQLStorageError, Session, error_code

T = TypeVar("T")

DUPLICATE_KEY = 1062
# Float dust must not turn 3 refilled tokens into 2.999999 and grant only 2.
_EPSILON = 1e-9


class MySQLControlStore(MySQLIdempotencyMixin, MySQLCounterMixin):
    """Idempotency keys of enqueues and event counters come from the mixins;
    their tables are created with the others."""

    def __init__(self, address: MySQLAddress, socket_timeout_s: float = 5.0) -> None:
        self._address = address
        self._pool = ConnectionPool(
            address,
            socket_timeout_s=socket_timeout_s,
            prepare=self._prepare,
            unavailable=self._unavailable,
        )

    @classmethod
    def from_url(cls, url: str, socket_timeout_s: float = 5.0) -> MySQLControlStore:
        return cls(MySQLAddress.parse(url), socket_timeout_s)

    def __repr__(self) -> str:
        return f"MySQLControlStore({self._address})"

    def _unavailable(self, cause: BaseException) -> ShardConnectionFailed:
        return ShardConnectionFailed(f"control store (mysql {self._address}) unavailable: {cause}")

    def _prepare(self, s: Session) -> None:
        check_mysql_layout(s, MYSQL_CONTROL, f"control store (mysql {self._address})")
        s.execute(sql("ctl_create_config_table"))
        s.execute(sql("ctl_create_bucket_table"))
        s.execute(sql("ctl_create_counts_table"))
        s.execute(sql("ctl_create_idempotency_table"))

    def _run(self, work: Callable[[Session], T], transaction: bool = False) -> T:
        """``work``, retried once after creating our tables again should one
        have gone missing (the database was dropped and recreated)."""
        return run_creating_missing_tables(self._pool, work, transaction=transaction)

    # -- queue configs -------------------------------------------------------
    def get_queue(self, name: str) -> QueueConfig | None:
        def work(s: Session) -> QueueConfig | None:
            s.execute(sql("ctl_get_config"), {"name": name})
            rows = s.fetchall()
            return read_stored_config(name, rows[0][0]) if rows else None

        return self._run(work)

    def list_queues(self) -> dict[str, QueueConfig]:
        return read_stored_configs(self.queue_config_texts())

    def queue_config_texts(self) -> dict[str, str | bytes]:
        def work(s: Session) -> dict[str, str | bytes]:
            s.execute(sql("ctl_list_configs"))
            return {str(name): text for name, text in s.fetchall()}

        return self._run(work)

    def create_queue(self, config: QueueConfig) -> bool:
        args = {"name": config.name, "config": config.to_json()}
        try:
            self._run(lambda s: s.execute(sql("ctl_insert_config"), args))
        except MySQLStorageError as exc:
            if error_code(exc) != DUPLICATE_KEY:
                raise
            return False
        return True

    def put_queue(self, config: QueueConfig) -> None:
        args = {"name": config.name, "config": config.to_json()}
        self._run(lambda s: s.execute(sql("ctl_put_config"), args))

    def delete_queue(self, name: str) -> None:
        def work(s: Session) -> None:
            s.execute(sql("ctl_delete_config"), {"name": name})
            s.execute(sql("ctl_delete_bucket"), {"bucket": name})

        self._run(work, transaction=True)

    # -- rate buckets ----------------------------------------------------------
    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        if wanted <= 0 or rate <= 0:
            return 0  # nothing to take, or nothing ever refills: leave the bucket alone

        def work(s: Session) -> int:
            # The bucket row stays locked (FOR UPDATE) from this read to COMMIT,
            # so refill-and-take is atomic across every process.
            s.execute(sql("ctl_lock_bucket"), {"bucket": bucket})
            rows = s.fetchall()
            if not rows:  # a missing bucket starts full
                s.execute(sql("ctl_init_bucket"), {"bucket": bucket, "burst": burst})
                s.execute(sql("ctl_lock_bucket"), {"bucket": bucket})
                rows = s.fetchall()
            tokens, ts, now = float(rows[0][0]), int(rows[0][1]), int(rows[0][2])
            # A clock step backwards refills nothing rather than draining.
            tokens = min(burst, tokens + max(0, now - ts) * rate / 1000.0)
            granted = max(0, min(wanted, math.floor(tokens + _EPSILON)))
            args = {"bucket": bucket, "tokens": max(0.0, tokens - granted), "ts": now}
            s.execute(sql("ctl_store_bucket"), args)
            return granted

        return self._run(work, transaction=True)

    def release(self, bucket: str, count: int, burst: float) -> None:
        if count <= 0:
            return
        # One statement: atomic. A missing bucket counts as full: nothing to do.
        args = {"bucket": bucket, "count": count, "burst": burst}
        self._run(lambda s: s.execute(sql("ctl_release"), args))

    def close(self) -> None:
        self._pool.close()
