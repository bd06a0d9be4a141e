"""The storage layer's loaders and layout rules, without servers."""

from __future__ import annotations

import logging

import pytest
import redis

from pinlater.errors import StorageError
from pinlater.kit.sqlblocks import job_table, job_table_parts, named_blocks
from pinlater.stores.base import ShardBusy, ShardOutcomeUnknown, ShardUnavailable
from pinlater.stores.layout import Kind, LayoutError, Step, accept
from pinlater.stores.mysql.claims import _dequeue_args, _dequeue_text
from pinlater.stores.mysql.statements import sql
from pinlater.stores.redis import keys
from pinlater.stores.redis.errors import redis_guard
from pinlater.stores.redis.loader import checked_source, used_prelude


def _noop(_target: object) -> None:
    """A step with nothing to do, for the version arithmetic."""


def test_a_script_without_its_keys_and_argv_header_is_not_loaded() -> None:
    assert checked_source("pinlater.stores.redis", "layout").startswith("-- layout")
    assert "local function now_ms" in checked_source("pinlater.stores.redis", "dequeue", prelude="_prelude")
    with pytest.raises(ValueError, match=r"_prelude\.lua lacks its '-- _prelude' line or KEYS/ARGV header"):
        checked_source("pinlater.stores.redis", "_prelude")


def test_the_records_sql_loads_with_the_same_loader() -> None:
    records = named_blocks("pinlater.stores.mysql", "sql/records.sql")
    assert records("pld_recent") == "SELECT doc FROM pld_log WHERE log = %s ORDER BY id DESC LIMIT %s"
    assert records("pld_create_log").startswith("CREATE TABLE IF NOT EXISTS pld_log (")
    with pytest.raises(KeyError):
        records("no_such_block")


def test_the_priority_placeholder_takes_only_a_priority() -> None:
    read = sql("dequeue_read", table="q_q_p7", priority=7)
    assert "IF pl_got_7 > 0 THEN" in read and "7 AS priority" in read and "{" not in read
    for bad in (None, 0, 101, "7", 7.0, True):
        with pytest.raises(ValueError, match="priority must be an int"):
            sql("dequeue_read", table="q_q_p7", priority=bad)


def test_the_queue_placeholder_takes_only_a_safe_name_as_a_literal() -> None:
    trigger = sql("unique_trigger", table="q_a_p1_p2", queue="a_p1", priority=2)
    assert "VALUES ('a_p1', NEW.ukey, 2, NEW.id)" in trigger and "ON `q_a_p1_p2`" in trigger
    for bad in (None, "", "a'b", "a b", "x" * 51, "a\\"):
        with pytest.raises(ValueError, match="unsafe or missing queue name"):
            sql("unique_trigger", table="q_a_p1", queue=bad, priority=1)


def test_a_job_tables_name_gives_back_its_queue_and_priority() -> None:
    for queue, priority in (("a", 1), ("a_p1", 2), ("x" * 50, 100), ("q_p", 3)):
        assert job_table_parts(job_table(queue, priority)) == (queue, priority)
    for bad in ("queues", "q__p1", "q_a_p0", "q_a_p1x", "pinlater_unique"):
        with pytest.raises(ValueError, match="not a job table"):
            job_table_parts(bad)


def test_a_rows_offset_is_its_index_times_the_step() -> None:
    text = sql("unique_new", rows=3, priority=2, step=5)
    assert text.count("(%s, %s, 2, LAST_INSERT_ID() + ") == 3
    assert [text.index(f"LAST_INSERT_ID() + {k})") for k in (0, 5, 10)] == sorted(
        text.index(f"LAST_INSERT_ID() + {k})") for k in (0, 5, 10))
    for bad in (0, -1, 1.0, "2"):
        with pytest.raises(ValueError, match="step must be a positive int"):
            sql("unique_new", rows=2, priority=2, step=bad)


def test_the_dequeue_is_one_compound_statement_with_its_arguments_in_order() -> None:
    text = _dequeue_text("q", (1, 2), (3,), True)
    assert text.startswith("BEGIN NOT ATOMIC") and text.endswith("END")
    # Claims in priority order, then the look ahead, COMMIT, then the reads.
    marks = ["`q_q_p1` FORCE INDEX (by_run_after)", "`q_q_p2` FORCE INDEX (by_run_after)", "`q_q_p3`",
             "COMMIT;", "`q_q_p1` FORCE INDEX (by_claim)", "`q_q_p2` FORCE INDEX (by_claim)"]
    assert [text.index(m) for m in marks] == sorted(text.index(m) for m in marks)
    args = _dequeue_args("q", (1, 2), 5, "tok@src", (3,))
    # The tables' names first (is a priority served by lanes?), then the claims.
    assert args == [5, "q_q_p1", "q_q_p2", "tok@src", "tok@src", 0, 3, "tok@src", "tok@src"]
    assert text.count("%s") == len(args)
    assert _dequeue_text("q", (1, 2), (3,), True) is text  # built once per (queue, priorities, look ahead)
    # The trace column is read from layout 4 on; before, NULL stands in for it.
    assert text.count(", trace AS trace") == 2
    old = _dequeue_text("q", (1, 2), (3,), False)
    assert old.count(", NULL AS trace") == 2 and " trace" not in old.replace("NULL AS trace", "")


def test_every_key_has_one_of_the_three_prefixes() -> None:
    made = [
        keys.QUEUES, keys.SHARD_LAYOUT, keys.CONTROL_QUEUES, keys.CONTROL_LAYOUT,
        keys.ids_key("q"), keys.jobs_key("q", 1), keys.rate_key("q"), keys.counts_key(5),
        keys.idempotency_key("k"), keys.records_log_key("audit"), keys.records_map_key("progress"),
    ]  # fmt: skip
    assert all(k.split(":", 1)[0] in ("pl", "plc", "pld") for k in made)
    assert len(set(made)) == len(made)


def test_layout_rules(caplog: pytest.LogCaptureFixture) -> None:
    kind: Kind[object] = Kind("test store", "t:layout", "t:queues", {
        1: Step("one", _noop, compatible=True),
        2: Step("two", _noop, compatible=False),
        3: Step("three", _noop, compatible=True),
    })  # fmt: skip
    assert (kind.current, kind.usable_from) == (4, 3)
    accept(kind, 4, "store a")
    with pytest.raises(LayoutError, match=r"^store a has storage layout 5, newer than this PinLater knows"):
        accept(kind, 5, "store a")
    with pytest.raises(LayoutError, match=r"^store a has storage layout 2, this PinLater needs 4: run `pinlater"):
        accept(kind, 2, "store a")
    with caplog.at_level(logging.WARNING, logger="pinlater.stores.layout"):
        accept(kind, 3, "store b")
        accept(kind, 3, "store b")
    assert [r.getMessage() for r in caplog.records] == [
        "store b has storage layout 3, current is 4: run `pinlater migrate`"
    ]
    assert Kind("empty", "e", "m").current == 1


def test_a_script_gets_only_the_prelude_it_uses() -> None:
    prelude = "\n\n".join([
        "-- header",
        "local function a()\nend",
        "local function b()\n  a()\nend",
        "local c, d\nif x then\n  c = 1\nend",
        "local function e()\nend",
    ])
    assert used_prelude(prelude, "return b()") == "local function a()\nend\n\nlocal function b()\n  a()\nend"
    assert used_prelude(prelude, "return d") == "local c, d\nif x then\n  c = 1\nend"
    assert used_prelude(prelude, "return 1") == ""
    count = checked_source("pinlater.stores.redis", "count", prelude="_prelude")
    assert "local function now_ms" in count and "local function read_job" not in count


def test_a_redis_command_that_failed_after_it_was_sent_may_have_run() -> None:
    guard = redis_guard("redis shard r1", ShardUnavailable, ShardOutcomeUnknown)
    sent = r"^redis shard r1 unavailable after a command was sent \(it may have run\): "
    for error in (redis.TimeoutError("Timeout reading from 10.77.0.3:6379"),
                  redis.ConnectionError("Connection closed by server."),
                  redis.ConnectionError("Error while reading from 10.77.0.3:6379 : (104,)")):
        with pytest.raises(ShardOutcomeUnknown, match=sent), guard:
            raise error
    for unsent in (redis.TimeoutError("Timeout connecting to server"),
                   redis.ConnectionError("Error 111 connecting to 10.77.0.3:6379. Connection refused."),
                   redis.TimeoutError("Timeout writing to socket")):
        with pytest.raises(ShardUnavailable, match=r"^redis shard r1 unavailable: ") as plain, guard:
            raise unsent
        assert not isinstance(plain.value, ShardOutcomeUnknown)


def test_one_redis_guard_serves_every_block_of_its_store() -> None:
    guard = redis_guard("redis shard r1", ShardUnavailable)
    for _ in range(2):
        with pytest.raises(ShardUnavailable, match=r"^redis shard r1 unavailable: gone") as err, guard:
            raise redis.ConnectionError("gone")
        assert isinstance(err.value.__cause__, redis.ConnectionError)
    with pytest.raises(ShardBusy), guard:
        raise redis.ConnectionError("No connection available.")
    with pytest.raises(StorageError, match=r"^redis shard r1: WRONGTYPE") as failed, guard:
        raise redis.ResponseError("WRONGTYPE wrong kind of value")
    assert not isinstance(failed.value, ShardUnavailable | ShardBusy)
    with pytest.raises(KeyError), guard:
        raise KeyError("not redis-py's: passes through")
    with guard:
        pass
