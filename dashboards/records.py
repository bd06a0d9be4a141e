"""Where the dashboard keeps its own records: the audit log and progress.

They live in the control store (same URL, Redis or MySQL; memory:// for
tests), beside the queue configs the controls change: every PinLater
process already depends on it, it is durable (Redis with its AOF, InnoDB),
it is shared, so several dashboards and any process publishing progress see
the same records, and it outlives the machine a dashboard runs on (a JSONL
file would not). Two shapes are enough:

* a log: newest-first list of JSON documents (append, recent);
* a table: JSON documents by key (put, items, remove).

Redis keys (``pld:`` is apart from the job service's ``pl:``/``plc:``, all
named in ``pinlater.storage.keys``): ``pld:log:{name}`` list, newest at the
head, capped; ``pld:map:{name}`` hash key -> JSON. MySQL tables: ``pld_log``
and ``pld_map`` (statements in ``sql/records.sql``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol, TypeVar

from pinlater.errors import ShardConnectionFailed
from pinlater.kit.sqlblocks import named_blocks
from pinlater.storage.errors import redis_guard, run_creating_missing_tables
from pinlater.storage.keys import records_log_key, records_map_key
from pinlater.storage.mysql_pool import ConnectionPool, MySQLAddress, Session
from pinlater.storage.redis_pool import open_redis

T = TypeVar("T")
Doc = dict[str, Any]
SQL = named_blocks("dashboards", "sql/records.sql")


class RecordStore(Protocol):
    def append(self, log: str, doc: Doc, cap: int) -> None:
        """Add ``doc`` at the head of ``log``, keeping at most ``cap`` (Redis)."""

    def recent(self, log: str, limit: int) -> list[Doc]:
        """Newest first."""

    def put(self, table: str, key: str, doc: Doc) -> None: ...

    def items(self, table: str) -> dict[str, Doc]: ...

    def remove(self, table: str, keys: list[str]) -> None: ...

    def close(self) -> None: ...


def open_records(url: str, socket_timeout_s: float = 5.0) -> RecordStore:
    scheme = url.split("://", 1)[0]
    if scheme in ("redis", "rediss"):
        return RedisRecords(url, socket_timeout_s)
    if scheme == "mysql":
        return MySQLRecords(url, socket_timeout_s)
    if scheme == "memory":
        return MemoryRecords.shared(url)
    raise ValueError(f"unsupported control store URL for dashboard records: {scheme}://...")


class RedisRecords:
    def __init__(self, url: str, socket_timeout_s: float) -> None:
        self._r = open_redis(url, socket_timeout_s)

    def _guard(self) -> AbstractContextManager[None]:
        return redis_guard("dashboard records (redis)", ShardConnectionFailed)

    def append(self, log: str, doc: Doc, cap: int) -> None:
        key = records_log_key(log)
        with self._guard():
            pipe = self._r.pipeline(transaction=True)
            pipe.lpush(key, json.dumps(doc, sort_keys=True))
            pipe.ltrim(key, 0, cap - 1)
            pipe.execute()

    def recent(self, log: str, limit: int) -> list[Doc]:
        with self._guard():
            raw = self._r.lrange(records_log_key(log), 0, limit - 1)
        return [json.loads(r) for r in raw]

    def put(self, table: str, key: str, doc: Doc) -> None:
        with self._guard():
            self._r.hset(records_map_key(table), key, json.dumps(doc, sort_keys=True))

    def items(self, table: str) -> dict[str, Doc]:
        with self._guard():
            raw = self._r.hgetall(records_map_key(table))
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def remove(self, table: str, keys: list[str]) -> None:
        if keys:
            with self._guard():
                self._r.hdel(records_map_key(table), *keys)

    def close(self) -> None:
        self._r.close()


class MySQLRecords:
    """The log is never trimmed in MySQL: a table holds years of operator
    actions, and deleting audit rows is a decision for a person."""

    def __init__(self, url: str, socket_timeout_s: float) -> None:
        self._pool = ConnectionPool(
            MySQLAddress.parse(url),
            socket_timeout_s=socket_timeout_s,
            prepare=self._prepare,
            unavailable=lambda exc: ShardConnectionFailed(f"dashboard records (mysql) unavailable: {exc}"),
            max_idle=2,
        )

    @staticmethod
    def _prepare(s: Session) -> None:
        s.execute(SQL("pld_create_log"))
        s.execute(SQL("pld_create_map"))

    def _run(self, work: Callable[[Session], T]) -> T:
        return run_creating_missing_tables(self._pool, work)

    def append(self, log: str, doc: Doc, cap: int) -> None:
        text = json.dumps(doc, sort_keys=True)
        self._run(lambda s: s.execute(SQL("pld_append"), (log, text)))

    def recent(self, log: str, limit: int) -> list[Doc]:
        def work(s: Session) -> list[Doc]:
            s.execute(SQL("pld_recent"), (log, limit))
            return [json.loads(r[0]) for r in s.fetchall()]

        return self._run(work)

    def put(self, table: str, key: str, doc: Doc) -> None:
        text = json.dumps(doc, sort_keys=True)
        self._run(lambda s: s.execute(SQL("pld_put"), (table, key, text)))

    def items(self, table: str) -> dict[str, Doc]:
        def work(s: Session) -> dict[str, Doc]:
            s.execute(SQL("pld_items"), (table,))
            return {r[0]: json.loads(r[1]) for r in s.fetchall()}

        return self._run(work)

    def remove(self, table: str, keys: list[str]) -> None:
        for key in keys:
            self._run(lambda s, k=key: s.execute(SQL("pld_remove"), (table, k)))  # type: ignore[misc]

    def close(self) -> None:
        self._pool.close()


class MemoryRecords:
    """One store per memory:// URL within a process, like the memory control store."""

    _shared: ClassVar[dict[str, MemoryRecords]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._logs: dict[str, list[str]] = {}
        self._maps: dict[str, dict[str, str]] = {}

    @classmethod
    def shared(cls, url: str) -> MemoryRecords:
        with cls._shared_lock:
            return cls._shared.setdefault(url, cls())

    def append(self, log: str, doc: Doc, cap: int) -> None:
        with self._lock:
            entries = self._logs.setdefault(log, [])
            entries.insert(0, json.dumps(doc))
            del entries[cap:]

    def recent(self, log: str, limit: int) -> list[Doc]:
        with self._lock:
            return [json.loads(e) for e in self._logs.get(log, [])[:limit]]

    def put(self, table: str, key: str, doc: Doc) -> None:
        with self._lock:
            self._maps.setdefault(table, {})[key] = json.dumps(doc)

    def items(self, table: str) -> dict[str, Doc]:
        with self._lock:
            return {k: json.loads(v) for k, v in self._maps.get(table, {}).items()}

    def remove(self, table: str, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._maps.get(table, {}).pop(key, None)

    def close(self) -> None:
        pass
