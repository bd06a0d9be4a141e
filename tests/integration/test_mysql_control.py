"""The MySQL control store (queue configs, rate buckets, idempotency keys)
and recovery from a dropped database, against the real MariaDB of
``scripts/services`` (started if needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pinlater.kit.sqlblocks import named_blocks
from pinlater.queue_config import QueueConfig
from pinlater.stores.control import ControlStore
from pinlater.stores.mysql import control as mysql_control
from pinlater.stores.mysql.control import MySQLControlStore
from pinlater.stores.mysql.layout import migrate as migrate_layout
from pinlater.stores.mysql.pool import Session
from tests.integration.mysql_support import raw_connection as _raw
from tests.servers import mysql_url

V1_SQL = named_blocks("tests.integration", "sql/layout_v1.sql")
V2_SQL = named_blocks("tests.integration", "sql/layout_v2.sql")

# -- control store ------------------------------------------------------------------------


@pytest.fixture
def control(database: str) -> Iterator[MySQLControlStore]:
    store = MySQLControlStore.from_url(mysql_url(database + "_ctl"), socket_timeout_s=5.0)
    yield store
    store.close()
    conn = _raw()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}_ctl")
    conn.close()


def test_control_store_queue_configs(control: MySQLControlStore) -> None:
    assert isinstance(control, ControlStore)
    config = QueueConfig("cfg_a", priorities=2, max_dequeue_rate=5.0)
    assert control.get_queue("cfg_a") is None
    assert control.create_queue(config) is True
    assert control.create_queue(config.with_changes(priorities=9)) is False
    assert control.get_queue("cfg_a") == config
    control.put_queue(config.with_changes(paused=True))
    control.put_queue(QueueConfig("cfg_b"))
    assert control.list_queues() == {"cfg_a": config.with_changes(paused=True),
                                     "cfg_b": QueueConfig("cfg_b")}
    control.delete_queue("cfg_a")
    control.delete_queue("cfg_a")
    assert set(control.list_queues()) == {"cfg_b"}


def test_control_store_bucket_starts_full_and_releases(control: MySQLControlStore) -> None:
    assert control.acquire("b1", 10, 0.001, 4) == 4  # a missing bucket starts full
    assert control.acquire("b1", 10, 0.001, 4) == 0
    control.release("b1", 3, 4)
    control.release("b1", 3, 4)  # never above burst
    assert control.acquire("b1", 10, 0.001, 4) == 4
    assert control.acquire("b1", 10, 0, 4) == 0  # paused
    assert control.acquire("b1", 0, 100, 4) == 0
    control.release("missing", 5, 4)  # a missing bucket is full: nothing to do
    control.delete_queue("b1")  # forgets the bucket: full again
    assert control.acquire("b1", 10, 0.001, 4) == 4


def test_control_store_bucket_grants_the_rate_across_threads(control: MySQLControlStore) -> None:
    rate, burst, seconds = 100.0, 20.0, 2.0  # a burst that tolerates 200 ms gaps on a loaded machine
    granted = [0, 0]
    deadline = time.monotonic() + seconds

    def taker(k: int) -> None:
        while time.monotonic() < deadline:
            granted[k] += control.acquire("shared", 3, rate, burst)
            time.sleep(0.002)

    threads = [threading.Thread(target=taker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(granted)
    assert rate * seconds * 0.85 <= total <= burst + rate * (seconds + 0.2)
    assert min(granted) > 0


def test_many_buckets_cost_a_few_statements_however_many(
    control: MySQLControlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dequeue under a key rate takes a bucket per key it may serve: a
    step over hundreds is a few statements, not several per bucket. Names
    that differ only in trailing spaces are buckets of their own."""
    counted: list[str] = []
    execute = Session.execute

    def counting(self: Session, stmt: str, args: object = None) -> int:
        counted.append(stmt)
        return execute(self, stmt, args)  # type: ignore[arg-type]

    names = [f"q/key/{i}" for i in range(400)]
    assert control.acquire_many(names[:100], 2, 0.001, 3) == [2] * 100  # a quarter exists already
    monkeypatch.setattr(Session, "execute", counting)
    # A name twice is one take, answered at both places.
    assert control.acquire_many([*names, names[0]], 2, 0.001, 3) == [1] * 100 + [2] * 300 + [1]
    assert len(counted) <= 5
    counted.clear()
    control.release_many(dict.fromkeys(names, 5), 3)
    assert len(counted) <= 2
    monkeypatch.setattr(Session, "execute", execute)
    assert control.acquire_many(names[:2], 9, 0.001, 3) == [3, 3]  # never above the burst
    assert control.acquire_many(["pad", "pad "], 2, 0.001, 3) == [2, 2]
    assert control.acquire_many(["pad ", "pad"], 2, 0.001, 3) == [1, 1]


def test_idle_buckets_are_dropped_once_full_again(
    control: MySQLControlStore, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-key buckets, one per key ever served, are not kept forever: each
    has the expiry of a bucket idle long enough to be full again (at least
    a minute), and a later acquire drops the expired ones."""
    monkeypatch.setattr(mysql_control, "BUCKET_PURGE_EVERY", 1)  # a purge with every acquire
    before = int(time.time() * 1000)
    control.acquire_many(["q/a", "q/b"], 1, 1000.0, 5)  # full again in 5 ms: kept the minimum
    control.acquire_many(["q/slow"], 1, 0.001, 5)  # full again in 5,000 s
    after = int(time.time() * 1000)

    def expiries() -> dict[bytes, int]:
        conn = _raw(database + "_ctl")
        with conn.cursor() as cur:
            cur.execute("SELECT bucket, expires_at FROM pinlater_rate_bucket")
            found = {bytes(b): int(e) for b, e in cur.fetchall()}
        conn.close()
        return found

    found = expiries()
    assert before + 60_000 - 1000 <= found[b"q/a"] <= after + 60_000 + 1000
    assert found[b"q/slow"] >= before + 5_000_000 - 1000
    conn = _raw(database + "_ctl")
    with conn.cursor() as cur:
        cur.execute("UPDATE pinlater_rate_bucket SET expires_at = 1 WHERE bucket = 'q/a'")
        cur.execute("INSERT INTO pinlater_rate_bucket (bucket, tokens, ts) VALUES ('q/old', 0, 0)")  # no expiry
    conn.close()
    control.acquire_many(["q/c"], 1, 1000.0, 5)
    assert set(expiries()) == {b"q/b", b"q/slow", b"q/c", b"q/old"}


def test_a_control_store_at_layout_2_keeps_padded_names_until_migrated(database: str) -> None:
    """Layout 2 compared bucket names and idempotency keys padded ("k" and
    "k " were one row). Code of today keeps that on such a store, without
    failing, until `pinlater migrate` makes them bytes."""
    url = mysql_url(database + "_ctl")
    conn = _raw()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}_ctl CHARACTER SET utf8mb4")
    conn.close()
    conn = _raw(database + "_ctl")
    with conn.cursor() as cur:
        for block in ("layout_v1_ctl_config_table", "layout_v1_ctl_bucket_table", "layout_v1_ctl_idempotency_table"):
            cur.execute(V1_SQL(block))
        cur.execute(V2_SQL("layout_v2_meta"))
        cur.execute(V2_SQL("layout_v2_stamp"), {"name": "control"})
    conn.close()
    try:
        old = MySQLControlStore.from_url(url, socket_timeout_s=5.0)
        assert old.acquire_many(["pad", "pad "], 2, 0.001, 3) == [2, 1]  # one row
        assert old.reserve_enqueue("q/k", 60_000) and not old.reserve_enqueue("q/k ", 60_000)
        old.close()
        said: list[str] = []
        migrate_layout(url, False, "control store", 5.0, False, said.append)
        assert any("now at layout 3" in line for line in said), said
        new = MySQLControlStore.from_url(url, socket_timeout_s=5.0)
        # The shared row was spent; "pad " is a bucket of its own now, full.
        assert new.acquire_many(["pad", "pad "], 1, 0.001, 3) == [0, 1]
        conn = _raw(database + "_ctl")
        with conn.cursor() as cur:
            cur.execute("SELECT bucket, ts, expires_at FROM pinlater_rate_bucket ORDER BY bucket")
            rows = cur.fetchall()
        conn.close()
        assert [bytes(r[0]) for r in rows] == [b"pad", b"pad "] and all(r[2] > r[1] > 0 for r in rows)
        assert new.reserve_enqueue("q/k ", 60_000)
        assert new.recall_enqueue("q/k") == []  # reserved before, and still so
        new.close()
    finally:
        conn = _raw()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}_ctl")
        conn.close()


def test_control_store_idempotency_keys(control: MySQLControlStore) -> None:
    assert control.recall_enqueue("k1") is None
    assert control.reserve_enqueue("k1", 60_000) is True
    assert control.reserve_enqueue("k1", 60_000) is False
    assert control.recall_enqueue("k1") == []
    control.remember_enqueue("k1", ["q:sd1:p1:1", "q:sd1:p1:2"], 60_000)
    assert control.recall_enqueue("k1") == ["q:sd1:p1:1", "q:sd1:p1:2"]
    control.forget_enqueue("k1")
    assert control.recall_enqueue("k1") is None
    assert control.reserve_enqueue("k2", 1) is True
    time.sleep(0.01)
    assert control.recall_enqueue("k2") is None  # expired
    assert control.reserve_enqueue("k2", 60_000) is True
