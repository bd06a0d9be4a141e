"""``pinlater migrate`` on real servers: a shard and a control store made by
the previous layout (layout 1: today's keys and tables, no version record),
holding PENDING, RUNNING and FAILED jobs, are upgraded through the CLI; the
jobs are intact and usable, the version is recorded, a second run changes
nothing; a layout newer than the code is refused in one line, and so is an
older one that a step marks incompatible, until migrate has run. A new
store opened by several at once is at the current layout for each.

Shard and control store share one Redis db / MySQL database, as with the
default settings (the control store defaults to the first shard's URL)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pymysql
import pytest
import redis

from pinlater.cli import main
from pinlater.errors import ShardConnectionFailed
from pinlater.kit.sqlblocks import named_blocks
from pinlater.models import Ack
from pinlater.queue_config import QueueConfig
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.states import JobState
from pinlater.stores import open_backend
from pinlater.stores.layout import Kind, LayoutError, Step
from pinlater.stores.mysql.layout import MYSQL_CONTROL, MYSQL_SHARD, check_mysql_layout, each_job_table
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session
from pinlater.stores.mysql.statements import LAYOUT_SQL
from pinlater.stores.redis.layout import REDIS_CONTROL, REDIS_SHARD
from tests.integration.mysql_support import raw_connection, throwaway_database
from tests.servers import REDIS_PORTS, ensure_services, mysql_url, redis_db, redis_url

P, R, S, F = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED
Q = "mig"
OLD_CLAIM = "0123456789abcdef@old-worker"
# id -> (state, attempts_allowed, attempts_remaining, claim)
V1_JOBS = {1: (P, 3, 3, None), 2: (R, 3, 2, OLD_CLAIM), 3: (F, 1, 0, None), 4: (P, 3, 3, None)}
V1_SQL = named_blocks("tests.integration", "sql/layout_v1.sql")
REDIS_DB = redis_db(11)  # only this module uses it; flushed before and after
STATE_SUFFIX = {P: "pending", R: "running", S: "succeeded", F: "failed"}


def descriptor(local_id: int) -> str:
    return f"{Q}:ss1:p1:{local_id}"


def write_v1_redis(url: str) -> None:
    """Keys exactly as layout 1 wrote them (literal names, frozen here)."""
    r = redis.Redis.from_url(url)
    now = int(time.time() * 1000) - 1000
    r.sadd("pl:queues", Q)
    r.set(f"pl:{Q}:ids", len(V1_JOBS))
    r.sadd(f"pl:{Q}:prios", 1)
    for local_id, (state, allowed, remaining, claim) in V1_JOBS.items():
        r.hset(f"pl:{Q}:p1:j:{local_id}", mapping={
            "body": f"job {local_id}", "state": int(state), "attempts_allowed": allowed,
            "attempts_remaining": remaining, "custom_status": "", "created_at": now,
            "run_after": now, "updated_at": now, "claim": claim or "",
        })
        r.zadd(f"pl:{Q}:p1:{STATE_SUFFIX[state]}", {f"{local_id:020d}": now})
    r.hset("plc:queues", Q, QueueConfig(Q, priorities=1).to_json())
    r.close()


def write_v1_mysql(database: str) -> None:
    """Tables and rows exactly as layout 1 made them (tests/integration/sql)."""
    conn = raw_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database} CHARACTER SET utf8mb4")
    conn.close()
    conn = raw_connection(database)
    table = f"q_{Q}_p1"
    now = int(time.time() * 1000) - 1000
    with conn.cursor() as cur:
        for block in ("layout_v1_queues", "layout_v1_ctl_config_table", "layout_v1_ctl_bucket_table",
                      "layout_v1_ctl_counts_table", "layout_v1_ctl_idempotency_table"):
            cur.execute(V1_SQL(block))
        cur.execute(V1_SQL("layout_v1_job_table", table=table))
        cur.execute(V1_SQL("layout_v1_register_queue"), {"name": Q, "priorities": 1})
        for local_id, (state, allowed, remaining, claim) in V1_JOBS.items():
            cur.execute(V1_SQL("layout_v1_insert_job", table=table), {
                "id": local_id, "state": int(state), "body": f"job {local_id}".encode(),
                "allowed": allowed, "remaining": remaining, "at": now, "claim": claim,
            })
        cur.execute(V1_SQL("layout_v1_ctl_put_config"), {"name": Q, "config": QueueConfig(Q, priorities=1).to_json()})
    conn.close()


class OldStore:
    """One store pair (shard s1 + control) in layout 1, and how to read and
    set its recorded layout behind the code's back."""

    def __init__(self, kind: str, url: str, database: str | None) -> None:
        self.kind = kind
        self.url = url
        self.database = database
        self.shard_kind: Kind[object] = REDIS_SHARD if kind == "redis" else MYSQL_SHARD  # type: ignore[assignment]
        self.control_kind: Kind[object] = REDIS_CONTROL if kind == "redis" else MYSQL_CONTROL  # type: ignore[assignment]

    @property
    def settings(self) -> Settings:
        return Settings(shards=parse_shards(f"s1={self.url}"), control_url=self.url)

    def recorded(self) -> dict[str, int | None]:
        if self.kind == "redis":
            r = redis.Redis.from_url(self.url)
            found = {name: r.get(name) for name in ("pl:layout", "plc:layout")}
            r.close()
            return {"shard": None if found["pl:layout"] is None else int(found["pl:layout"]),
                    "control": None if found["plc:layout"] is None else int(found["plc:layout"])}
        conn = raw_connection(self.database)
        out: dict[str, int | None] = {"shard": None, "control": None}
        with conn.cursor() as cur:
            try:
                cur.execute("SELECT name, version FROM pinlater_meta")
                out.update({str(name): int(version) for name, version in cur.fetchall()})
            except pymysql.err.ProgrammingError:  # no table: nothing recorded
                pass
        conn.close()
        return out

    def set_shard_layout(self, version: int) -> None:
        if self.kind == "redis":
            r = redis.Redis.from_url(self.url)
            r.set("pl:layout", version)
            r.close()
            return
        conn = raw_connection(self.database)
        with conn.cursor() as cur:
            cur.execute("UPDATE pinlater_meta SET version = %s WHERE name = 'shard'", (version,))
        conn.close()


@pytest.fixture(params=["redis", "mysql"])
def old(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> OldStore:
    ensure_services(hbase=False)
    if request.param == "redis":
        url = redis_url(REDIS_PORTS[0], REDIS_DB)
        r = redis.Redis.from_url(url)
        r.flushdb()
        request.addfinalizer(r.close)
        request.addfinalizer(r.flushdb)
        write_v1_redis(url)
        store = OldStore("redis", url, None)
    else:
        databases = throwaway_database()
        database = next(databases)
        request.addfinalizer(lambda: next(databases, None))
        write_v1_mysql(database)
        store = OldStore("mysql", mysql_url(database), database)
    monkeypatch.setenv("PINLATER_SHARDS", f"s1={store.url}")
    monkeypatch.setenv("PINLATER_CONTROL_URL", store.url)
    return store


def upgrade_lines(where: str, kind: Kind[object], stored: int) -> list[str]:
    """What migrate prints for one store at layout ``stored``: every step
    up to the current layout, whatever steps later changes add."""
    return [
        f"{where}: layout {stored}, current {kind.current}",
        *(f"{where}: step {v} -> {v + 1}: {kind.steps[v].description}" for v in range(stored, kind.current)),
        f"{where}: now at layout {kind.current}",
    ]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_migrate_upgrades_a_layout_1_store_and_keeps_every_job(
    old: OldStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert old.recorded() == {"shard": None, "control": None}

    status, out, _ = run_cli(capsys, "migrate", "--dry-run")
    assert status == 0
    assert f"shard s1 ({old.kind}): would run step 1 -> 2: record the layout version" in out
    assert f"control store ({old.kind}): would run step 1 -> 2" in out
    assert old.recorded() == {"shard": None, "control": None}  # a dry run writes nothing

    status, out, _ = run_cli(capsys, "migrate")
    assert status == 0
    assert out.splitlines() == [
        *upgrade_lines(f"shard s1 ({old.kind})", old.shard_kind, 1),
        *upgrade_lines(f"control store ({old.kind})", old.control_kind, 1),
    ]
    current = {"shard": old.shard_kind.current, "control": old.control_kind.current}
    assert current["shard"] >= 2 and current["control"] >= 2
    assert old.recorded() == current

    # Every job as layout 1 left it, then the usual life of a job.
    with JobService.from_settings(old.settings, source="old-worker") as service:
        infos = service.lookup([descriptor(i) for i in V1_JOBS], include_body=True)
        for local_id, (state, allowed, remaining, claim) in V1_JOBS.items():
            info = infos[descriptor(local_id)]
            assert (info.state, info.attempts_allowed, info.attempts_remaining) == (state, allowed, remaining)
            assert info.body == f"job {local_id}".encode()
            assert info.claim == (claim and claim.split("@", 1)[1])  # lookups show the holder
        assert [service.count(Q, state) for state in (P, R, S, F)] == [2, 1, 0, 1]
        assert service.queue_config(Q).priorities == 1
        jobs = service.dequeue(Q, 10)
        assert sorted(job.descriptor for job in jobs) == [descriptor(1), descriptor(4)]
        # The claim taken under layout 1 still holds, exactly.
        result = service.ack(Q, succeeded=[Ack(job.descriptor) for job in jobs]
                             + [Ack(descriptor(2), claim=OLD_CLAIM)])
        assert not result.stale
        assert [service.count(Q, state) for state in (P, R, S, F)] == [0, 0, 3, 1]

    status, out, _ = run_cli(capsys, "migrate")
    assert status == 0
    assert out.splitlines() == [
        f"shard s1 ({old.kind}): layout {current['shard']}, up to date",
        f"control store ({old.kind}): layout {current['control']}, up to date",
    ]
    assert old.recorded() == current


def test_a_layout_newer_than_the_code_is_refused_in_one_line(
    old: OldStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(capsys, "migrate")[0] == 0
    current = old.shard_kind.current
    old.set_shard_layout(current + 1)
    backend = open_backend(old.settings.shards[0])
    try:
        newer = rf"has storage layout {current + 1}, newer than this PinLater knows \({current}\): upgrade PinLater$"
        with pytest.raises(LayoutError, match=newer):
            backend.count(Q, 1, P, False)
    finally:
        backend.close()
    status, _out, err = run_cli(capsys, "migrate")
    assert status == 2
    assert err.strip().splitlines() == [
        f"error (UNKNOWN): shard s1 ({old.kind}) has storage layout {current + 1}, newer than this PinLater"
        f" knows ({current}): upgrade PinLater"
    ]


def test_an_incompatible_step_refuses_the_store_until_migrate_runs_it(
    old: OldStore, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test-only next layout whose step the code cannot do without: the
    kind of step a later change adds (here an index on every job table, or
    a key)."""
    assert run_cli(capsys, "migrate")[0] == 0
    current = old.shard_kind.current
    if old.kind == "redis":
        apply = lambda client: client.set("pl:test-step", "done")  # noqa: E731
    else:
        apply = each_job_table("test_add_index", V1_SQL)
    monkeypatch.setitem(old.shard_kind.steps, current, Step("a test step", apply, compatible=False))

    backend = open_backend(old.settings.shards[0])
    try:
        needs = rf"has storage layout {current}, this PinLater needs {current + 1}: run `pinlater migrate`$"
        with pytest.raises(LayoutError, match=needs):
            backend.count(Q, 1, P, False)
        status, out, _ = run_cli(capsys, "migrate")
        assert status == 0
        assert f"shard s1 ({old.kind}): step {current} -> {current + 1}: a test step" in out.splitlines()
        assert old.recorded()["shard"] == current + 1
        assert backend.count(Q, 1, P, False) == 2  # the same backend: no restart needed
    finally:
        backend.close()
    if old.kind == "mysql":
        # A crash after the step but before its version was recorded runs it again.
        old.set_shard_layout(current)
        assert run_cli(capsys, "migrate")[0] == 0
        assert old.recorded()["shard"] == current + 1


def test_a_new_store_records_the_current_layout_when_first_used(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_services(hbase=False)
    database = f"pinlater_test_{uuid.uuid4().hex[:10]}"
    store = OldStore("mysql", mysql_url(database), database)
    try:
        with JobService.from_settings(store.settings) as service:
            service.create_queue(Q, priorities=1)
        assert store.recorded() == {"shard": MYSQL_SHARD.current, "control": MYSQL_CONTROL.current}
    finally:
        conn = raw_connection()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.close()


class _OpenedMeanwhile:
    """A session during which another opener of the same new store records
    its layout and makes its tables: between this one's read of the record
    (none yet) and its look for the marker table."""

    def __init__(self, s: Session, database: str) -> None:
        self.s, self.database, self.met = s, database, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.s, name)

    def scalar(self, stmt: str, args: Any = None) -> Any:
        if args == {"name": MYSQL_SHARD.marker} and not self.met:
            self.met = True
            conn = raw_connection(self.database)
            with conn.cursor() as cur:
                cur.execute("INSERT INTO pinlater_meta (name, version) VALUES ('shard', %s)", (MYSQL_SHARD.current,))
                cur.execute("CREATE TABLE queues (name VARCHAR(64) PRIMARY KEY)")
            conn.close()
        return self.s.scalar(stmt, args)


def test_a_new_store_opened_by_two_at_once_is_at_the_current_layout_for_both() -> None:
    """Not layout 1 (tables without a record) for the second: code that
    takes a store for layout 1 leaves keys off and drops jobs' fairness keys."""
    ensure_services(hbase=False)
    database = f"pinlater_test_{uuid.uuid4().hex[:10]}"
    conn = raw_connection()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    conn.close()
    conn = raw_connection(database)
    with conn.cursor() as cur:
        cur.execute(LAYOUT_SQL("meta_create"))  # the first opener has got this far
    conn.close()
    pool = ConnectionPool(MySQLAddress.parse(mysql_url(database)), socket_timeout_s=5.0, prepare=lambda s: None,
                          unavailable=lambda exc: ShardConnectionFailed(str(exc)))
    try:
        opened: list[_OpenedMeanwhile] = []

        def work(s: Session) -> int:
            opened.append(_OpenedMeanwhile(s, database))
            return check_mysql_layout(opened[-1], MYSQL_SHARD, "shard s1")  # type: ignore[arg-type]

        assert pool.run(work) == MYSQL_SHARD.current
        assert opened[0].met  # the other opener did come in between
    finally:
        pool.close()
        conn = raw_connection()
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
        conn.close()
