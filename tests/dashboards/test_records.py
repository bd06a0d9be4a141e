"""The dashboard's own records (audit log, progress) on every kind of
control store: Redis and MySQL for real, memory for single-process use."""

from __future__ import annotations

import uuid

import pymysql
import pytest

from dashboards.audit import AuditEntry, AuditLog
from dashboards.progress import KEEP_FINISHED_MS, STALE_MS, ProgressBoard
from pinlater.records import open_records
from tests.dashboards.support import CONTROL_DB
from tests.servers import REDIS_PORTS, WORKER_SUFFIX, mysql_url, redis_url

MYSQL_DB = f"pinlater_test_dash_records{WORKER_SUFFIX}"


@pytest.fixture(params=["memory", "redis", "mysql"])
def control_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return f"memory://{uuid.uuid4().hex}"
    request.getfixturevalue("servers")
    if request.param == "redis":
        return redis_url(REDIS_PORTS[0], CONTROL_DB)
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater")
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {MYSQL_DB}")  # the store creates it again
    conn.close()
    return mysql_url(MYSQL_DB)


def test_audit_log_is_newest_first_and_survives_reopening(control_url: str) -> None:
    queue = f"q_{uuid.uuid4().hex[:8]}"
    store = open_records(control_url)
    log = AuditLog(store, cap=1000)
    for i in range(3):
        assert log.record(AuditEntry("rate", queue, "ann", "127.0.0.1", {"rate": i}, ok=True, result={"n": i}))
    store.close()
    reopened = AuditLog(open_records(control_url))  # e.g. the dashboard restarted
    mine = [e for e in reopened.recent(50) if e["queue"] == queue]
    assert [e["params"]["rate"] for e in mine] == [2, 1, 0]
    assert mine[0]["operator"] == "ann" and mine[0]["at_ms"] > 0 and mine[0]["ok"] is True


def test_progress_board_lifecycle(control_url: str) -> None:
    board = ProgressBoard.open(control_url)
    op = f"op-{uuid.uuid4().hex[:8]}"
    try:
        first = board.publish(op, "Backfill", done=0)
        board.publish(op, "Backfill", done=5, total=10, detail="half")
        [record] = [r for r in board.list() if r["id"] == op]
        assert record["fraction"] == 0.5 and record["started_at_ms"] == first["started_at_ms"]
        assert next(r for r in board.list(now_ms=record["updated_at_ms"] + STALE_MS + 1) if r["id"] == op)["stale"]
        board.publish(op, "Backfill", done=10, total=10, status="done")
        assert not [r for r in board.list(now_ms=record["updated_at_ms"] + KEEP_FINISHED_MS + 60_000)
                    if r["id"] == op]  # finished long ago: dropped
        assert not [r for r in board.list() if r["id"] == op]
        with pytest.raises(Exception, match="status"):
            board.publish(op, "Backfill", done=1, status="exploded")
    finally:
        board.remove(op)
        board.close()
