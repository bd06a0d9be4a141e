"""The control store in MySQL (MariaDB): queue configs as JSON rows, rate
buckets refilled and taken from atomically on the server's clock, the
idempotency keys of enqueues, per-minute event counters and the records of
tools (the dashboard's audit log and progress).

Idempotency keys: table ``pinlater_idempotency``: key, JSON descriptors
(NULL while reserved), expiry in ms on the server's clock. ``INSERT
IGNORE`` on the primary key makes the reservation atomic; expired rows are
deleted on the way and, now and then, in bulk.

Concurrency slots: table ``pinlater_slot_owners`` (queue, owner) -> held,
last synced; every step locks the queue's total row (owner ``#``) first,
so that a count and a take are one step (``pinlater.engine.slots``).

Event counters: table ``pinlater_event_counts`` (minute, queue, event) -> n;
minutes older than ``RETENTION_MINUTES`` are purged now and then.

Records: tables ``pld_log`` and ``pld_map`` (``sql/records.sql``), made
when a tool first uses them (a store no tool writes records to has none).
The log is never trimmed in MySQL: a table holds years of operator actions,
and deleting audit rows is a decision for a person.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pinlater.errors import ShardConnectionFailed
from pinlater.queue_config import QueueConfig, read_stored_config, read_stored_configs
from pinlater.stores.control import (
    RETENTION_MINUTES,
    Counts,
    Doc,
    bucket_idle_ms,
    decode_descriptors,
    flatten_counts,
)
from pinlater.stores.mysql.batches import MySQLBatches
from pinlater.stores.mysql.errors import MySQLStorageError, error_code
from pinlater.stores.mysql.layout import MYSQL_CONTROL, check_mysql_layout
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session, run_creating_missing_tables
from pinlater.stores.mysql.statements import RECORDS_SQL, sql

T = TypeVar("T")

DUPLICATE_KEY = 1062
# Float dust must not turn 3 refilled tokens into 2.999999 and grant only 2.
_EPSILON = 1e-9
COUNTS_PURGE_EVERY = 50  # on average one flush in this many purges old minutes
IDEMPOTENCY_PURGE_EVERY = 100  # on average, one remember in this many purges expired keys
BUCKET_PURGE_EVERY = 100  # on average, one acquire in this many drops idle buckets


def _exact(bucket: object) -> str:
    return bucket.decode() if isinstance(bucket, bytes) else str(bucket)


def _padded(bucket: object) -> str:
    """A bucket's name as a store at layout 2 compares it: its column's
    collation pads, so trailing spaces do not count."""
    return _exact(bucket).rstrip(" ")


class MySQLControlStore(MySQLBatches):
    """ControlStore over one MySQL database; every table is created on first use."""

    def __init__(self, address: MySQLAddress, socket_timeout_s: float = 5.0) -> None:
        self._address = address
        # How the store keeps buckets, learnt by each new connection (`pinlater
        # migrate` may run while this process does): at layout 2 names compare
        # padded and buckets have no expiry.
        self._bucket_name: Callable[[object], str] = _exact
        self._buckets_expire = True
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
        pads = bool(s.scalar(sql("ctl_bucket_pads")))
        self._bucket_name, self._buckets_expire = (_padded, False) if pads else (_exact, True)
        s.execute(sql("ctl_create_counts_table"))
        s.execute(sql("ctl_create_idempotency_table"))
        s.execute(sql("ctl_create_slots_table"))
        s.execute(sql("ctl_create_key_slots_table"))
        s.execute(sql("ctl_create_key_owners_table"))
        s.execute(sql("ctl_create_batches_table"))
        s.execute(sql("ctl_create_batch_jobs_table"))

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

    def replace_queue(self, current: QueueConfig, updated: QueueConfig) -> bool:
        def work(s: Session) -> bool:
            s.execute(sql("ctl_lock_config"), {"name": current.name})
            rows = s.fetchall()
            if not rows or read_stored_config(current.name, rows[0][0]) != current:
                return False
            s.execute(sql("ctl_put_config"), {"name": updated.name, "config": updated.to_json()})
            return True

        return bool(self._run(work, transaction=True))

    def delete_queue(self, name: str) -> None:
        def work(s: Session) -> None:
            s.execute(sql("ctl_delete_config"), {"name": name})
            s.execute(sql("ctl_delete_bucket"), {"bucket": name})
            s.execute(sql("slot_drop"), {"queue": name})
            s.execute(sql("key_slot_drop"), {"queue": name})
            s.execute(sql("key_slot_drop_owners"), {"queue": name})

        self._run(work, transaction=True)

    # -- rate buckets ----------------------------------------------------------
    def acquire(self, bucket: str, wanted: int, rate: float, burst: float) -> int:
        return self.acquire_many([bucket], wanted, rate, burst)[0]

    def acquire_many(self, buckets: Sequence[str], wanted: int, rate: float, burst: float) -> list[int]:
        if wanted <= 0 or rate <= 0 or not buckets:
            return [0] * len(buckets)  # nothing to take, or nothing ever refills: leave the buckets alone
        names = sorted(set(buckets))

        def work(s: Session) -> list[int]:
            # Known once this session's connection is prepared.
            name_of, expire = self._bucket_name, self._buckets_expire

            def lock(these: list[str]) -> dict[str, tuple[float, int, int]]:
                s.execute(sql("ctl_lock_buckets", ids=len(these)), these)
                return {name_of(r[0]): (float(r[1]), int(r[2]), int(r[3])) for r in s.fetchall()}

            # A few statements however many buckets: a dequeue under a key
            # rate takes one per key it may serve, hundreds at a time.
            rows = lock(names)
            missing = [b for b in names if name_of(b) not in rows]
            if missing:
                s.execute(sql("ctl_init_buckets", rows=len(missing)), [v for b in missing for v in (b, burst)])
                rows.update(lock(missing))
            granted: dict[str, int] = {}
            stored: dict[str, tuple[str, float, int] | tuple[str, float, int, int]] = {}
            idle_ms = bucket_idle_ms(rate, burst)
            for b in names:
                row = name_of(b)  # names a store at layout 2 holds as one row (trailing spaces) share it
                tokens, ts, now = rows[row]
                # A clock step backwards refills nothing rather than draining.
                tokens = min(burst, tokens + max(0, now - ts) * rate / 1000.0)
                granted[b] = max(0, min(wanted, math.floor(tokens + _EPSILON)))
                left = max(0.0, tokens - granted[b])
                rows[row] = (left, now, now)
                stored[row] = (b, left, now, now + idle_ms) if expire else (b, left, now)
            block = "ctl_store_expiring_buckets" if expire else "ctl_store_buckets"
            s.execute(sql(block, rows=len(stored)), [v for row in stored.values() for v in row])
            return [granted[b] for b in buckets]

        granted = self._run(work, transaction=True)
        if self._buckets_expire and random.randrange(BUCKET_PURGE_EVERY) == 0:
            self._run(lambda s: s.execute(sql("ctl_purge_buckets")))
        return granted

    def release(self, bucket: str, count: int, burst: float) -> None:
        self.release_many({bucket: count}, burst)

    def release_many(self, counts: Mapping[str, int], burst: float) -> None:
        given = sorted((b, n) for b, n in counts.items() if n > 0)
        if not given:
            return
        # One statement, atomic. A missing bucket counts as full: nothing to do.
        self._run(lambda s: s.execute(sql("ctl_release", rows=len(given)), [*(v for g in given for v in g), burst]))

    # -- concurrency slots ----------------------------------------------------
    @staticmethod
    def _lock_slots(s: Session, queue: str) -> tuple[int, int]:
        """Lock the queue's total row (made if missing): (total, now ms)."""
        s.execute(sql("slot_lock"), {"queue": queue})
        rows = s.fetchall()
        if not rows:
            s.execute(sql("slot_total_init"), {"queue": queue})
            s.execute(sql("slot_lock"), {"queue": queue})
            rows = s.fetchall()
        return int(rows[0][0]), int(rows[0][1])

    @staticmethod
    def _held(s: Session, queue: str, owners: Sequence[str]) -> dict[str, tuple[int, int]]:
        if not owners:
            return {}
        s.execute(sql("slot_held", ids=len(owners)), [queue, *owners])
        return {str(o): (int(h), int(at)) for o, h, at in s.fetchall()}

    @staticmethod
    def _put(s: Session, queue: str, owner: str, held: int, synced_ms: int) -> None:
        s.execute(sql("slot_put"), [queue, owner, max(0, held), synced_ms])

    def slots_sync(
        self, queue: str, cap: int, owner: str, want: int, give_back: int = 0,
        frees: Mapping[str, int] | None = None, leaving: bool = False, first: bool = False,
    ) -> tuple[int, int] | None:
        freeing = {o: n for o, n in (frees or {}).items() if n > 0 and o != owner}

        def work(s: Session) -> tuple[int, int] | None:
            total, now = self._lock_slots(s, queue)
            held = self._held(s, queue, [*freeing, owner])
            if first and owner in held:
                return None
            for o, n in freeing.items():
                h, at = held.get(o, (0, 0))
                d = min(n, h)
                if d and at != 0:  # stamp 0: left, the monitor's to count
                    total -= d
                    self._put(s, queue, o, h - d, at)
            h = held.get(owner, (0, 0))[0]
            g = min(give_back, h)
            h, total = h - g, total - g
            granted = max(0, min(want, cap - total))
            h, total = h + granted, total + granted
            self._put(s, queue, owner, h, 0 if leaving else now)
            s.execute(sql("slot_put"), [queue, "#", total, 0])
            return granted, h

        return self._run(work, transaction=True)

    def slots_owners(self, queue: str) -> tuple[int, dict[str, tuple[int, int]]]:
        def work(s: Session) -> tuple[int, dict[str, tuple[int, int]]]:
            s.execute(sql("slot_owners"), {"queue": queue})
            rows = s.fetchall()
            if not rows:
                s.execute(sql("slot_now"))
                return int(s.fetchall()[0][0]), {}
            owners = {str(o): (int(h), int(at)) for o, h, at, _ in rows if o != "#"}
            return int(rows[0][3]), owners

        return self._run(work)

    def slots_settle(self, queue: str, counts: Mapping[str, int], stale_before_ms: int) -> int:
        if not counts:
            return 0

        def work(s: Session) -> int:
            total, _ = self._lock_slots(s, queue)
            held = self._held(s, queue, list(counts))
            freed = 0
            for o, n in counts.items():
                h, at = held.get(o, (0, 0))
                if o not in held or at < stale_before_ms:
                    freed += h - n
                    total += n - h
                    if n:
                        self._put(s, queue, o, n, 0)
                    else:
                        s.execute(sql("slot_forget"), [queue, o])
            s.execute(sql("slot_put"), [queue, "#", total, 0])
            return freed

        return self._run(work, transaction=True)

    def slots_drop(self, queue: str) -> None:
        self._run(lambda s: s.execute(sql("slot_drop"), {"queue": queue}))

    # -- per-key slots ----------------------------------------------------------
    @staticmethod
    def _lock_key_slots(s: Session, queue: str) -> int:
        """Lock the queue's per-key slots (its '#' row, made if missing); the
        server's clock (ms)."""
        s.execute(sql("key_slot_lock"), {"queue": queue})
        rows = s.fetchall()
        if not rows:
            s.execute(sql("key_slot_lock_init"), {"queue": queue})
            s.execute(sql("key_slot_lock"), {"queue": queue})
            rows = s.fetchall()
        return int(rows[0][0])

    def key_slots_sync(
        self, queue: str, cap: int, owner: str, want: Mapping[str, int],
        frees: Mapping[tuple[str, str], int] | None = None, leaving: bool = False,
    ) -> dict[str, int]:
        freeing = {at: n for at, n in (frees or {}).items() if n > 0}

        def work(s: Session) -> dict[str, int]:
            now = self._lock_key_slots(s, queue)
            for (o, k), n in freeing.items():
                s.execute(sql("key_slot_free"), [n, queue, o, k.encode()])
            granted = dict.fromkeys(want, 0)
            if want:
                encoded = [k.encode() for k in want]
                s.execute(sql("key_slot_totals", ids=len(encoded)), [queue, *encoded])
                totals = {bytes(k).decode(): int(n) for k, n in s.fetchall()}
                for k, w in want.items():
                    granted[k] = g = max(0, min(w, cap - totals.get(k, 0)))
                    if g:
                        s.execute(sql("key_slot_add"), [queue, owner, k.encode(), g])
            if freeing:
                s.execute(sql("key_slot_sweep"), {"queue": queue})
            s.execute(sql("key_slot_stamp"), [queue, owner, 0 if leaving else now])
            return granted

        return self._run(work, transaction=True)

    def key_slots_owners(self, queue: str) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
        def work(s: Session) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
            s.execute(sql("slot_now"))
            now = int(s.fetchall()[0][0])
            s.execute(sql("key_slot_stamps"), {"queue": queue})
            stamps = {str(o): int(at) for o, at in s.fetchall()}
            s.execute(sql("key_slot_held"), {"queue": queue})
            held = {(str(o), bytes(k).decode()): int(n) for o, k, n in s.fetchall()}
            return now, stamps, held

        return self._run(work)

    def key_slots_settle(self, queue: str, counts: Mapping[tuple[str, str], int], stale_before_ms: int) -> int:
        if not counts:
            return 0

        def work(s: Session) -> int:
            self._lock_key_slots(s, queue)
            s.execute(sql("key_slot_stamps"), {"queue": queue})
            stamps = {str(o): int(at) for o, at in s.fetchall()}
            s.execute(sql("key_slot_held"), {"queue": queue})
            held = {(str(o), bytes(k).decode()): int(n) for o, k, n in s.fetchall()}
            freed = 0
            settled: set[str] = set()
            for (o, k), n in counts.items():
                if stamps.get(o, -1) < stale_before_ms:
                    settled.add(o)
                    freed += held.get((o, k), 0) - n
                    s.execute(sql("key_slot_set"), [queue, o, k.encode(), n])
            s.execute(sql("key_slot_sweep"), {"queue": queue})
            for o in settled:
                s.execute(sql("key_slot_owner_holds"), [queue, o])
                if s.fetchone()[0]:
                    s.execute(sql("key_slot_stamp"), [queue, o, 0])
                else:
                    s.execute(sql("key_slot_forget"), [queue, o])
            return freed

        return self._run(work, transaction=True)

    def key_slots_drop(self, queue: str) -> None:
        def work(s: Session) -> None:
            s.execute(sql("key_slot_drop"), {"queue": queue})
            s.execute(sql("key_slot_drop_owners"), {"queue": queue})

        self._run(work, transaction=True)

    # -- idempotency keys of enqueues -------------------------------------------

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        def work(s: Session) -> bool:
            s.execute(sql("idem_delete_expired_key"), {"k": key})
            return s.execute(sql("idem_reserve"), {"k": key, "ttl": max(1, ttl_ms)}) == 1

        return self._run(work)

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        args = {"k": key, "d": json.dumps(list(descriptors)), "ttl": max(1, ttl_ms)}

        def work(s: Session) -> None:
            s.execute(sql("idem_remember"), args)
            if random.randrange(IDEMPOTENCY_PURGE_EVERY) == 0:
                s.execute(sql("idem_purge"))

        self._run(work)

    def recall_enqueue(self, key: str) -> list[str] | None:
        def work(s: Session) -> tuple[tuple[Any, ...], ...]:
            s.execute(sql("idem_recall"), {"k": key})
            return s.fetchall()

        rows = self._run(work)
        return decode_descriptors(rows[0][0]) if rows else None

    def forget_enqueue(self, key: str) -> None:
        self._run(lambda s: s.execute(sql("idem_forget"), {"k": key}))

    # -- event counters ----------------------------------------------------------

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        rows = flatten_counts(counts)
        if not rows:
            return
        args: list[Any] = [v for q, e, n in rows for v in (minute, q, e, n)]

        def work(s: Session) -> None:
            s.execute(sql("ctl_add_counts", rows=len(rows)), args)
            if random.randrange(COUNTS_PURGE_EVERY) == 0:
                s.execute(sql("ctl_purge_counts"), {"before": minute - RETENTION_MINUTES})

        self._run(work)

    def read_counts(self, since_minute: int, until_minute: int) -> Counts:
        def work(s: Session) -> tuple[tuple[Any, ...], ...]:
            s.execute(sql("ctl_read_counts"), {"since": since_minute})
            return s.fetchall()

        out: Counts = {}
        for minute, queue, event, n in self._run(work):
            if int(minute) <= until_minute:
                out.setdefault(int(minute), {}).setdefault(str(queue), {})[str(event)] = int(n)
        return out

    # -- records -------------------------------------------------------------------

    def _create_records_tables(self) -> None:
        def work(s: Session) -> None:
            s.execute(RECORDS_SQL("pld_create_log"))
            s.execute(RECORDS_SQL("pld_create_map"))

        self._pool.run(work)

    def _records(self, work: Callable[[Session], T]) -> T:
        """``work`` on the records' tables, made first should they be missing."""
        return run_creating_missing_tables(self._pool, work, create=self._create_records_tables)

    def log_append(self, log: str, doc: Doc, cap: int) -> None:
        text = json.dumps(doc, sort_keys=True)
        self._records(lambda s: s.execute(RECORDS_SQL("pld_append"), (log, text)))

    def log_recent(self, log: str, limit: int) -> list[Doc]:
        def work(s: Session) -> list[Doc]:
            s.execute(RECORDS_SQL("pld_recent"), (log, limit))
            return [json.loads(r[0]) for r in s.fetchall()]

        return self._records(work)

    def map_put(self, table: str, key: str, doc: Doc) -> None:
        text = json.dumps(doc, sort_keys=True)
        self._records(lambda s: s.execute(RECORDS_SQL("pld_put"), (table, key, text)))

    def map_items(self, table: str) -> dict[str, Doc]:
        def work(s: Session) -> dict[str, Doc]:
            s.execute(RECORDS_SQL("pld_items"), (table,))
            return {r[0]: json.loads(r[1]) for r in s.fetchall()}

        return self._records(work)

    def map_remove(self, table: str, keys_: Sequence[str]) -> None:
        for key in keys_:
            self._records(lambda s, k=key: s.execute(RECORDS_SQL("pld_remove"), (table, k)))  # type: ignore[misc]

    def close(self) -> None:
        self._pool.close()
