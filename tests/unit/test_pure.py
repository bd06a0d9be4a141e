"""Fast tests of the pure pieces: retry policies, descriptors, settings,
continuations, queue configs."""

from __future__ import annotations

import math

import pytest

from pinlater.descriptor import JobDescriptor, descriptor_prefix
from pinlater.engine import continuation as cont
from pinlater.engine.config_cache import QueueConfigCache
from pinlater.errors import (
    ContinuationInvalid,
    ErrorCode,
    InvalidRequest,
    QueueNameInvalid,
    QueueNotFound,
    error_for_code,
)
from pinlater.limits import MAX_DEQUEUE_RATE, MAX_RUNNING_CAP
from pinlater.queue_config import QueueConfig
from pinlater.retry import RetryPolicy, backoff_delay_ms, delay_table
from pinlater.settings import Settings, parse_shards
from pinlater.states import JobState
from pinlater.stores.memory.control import MemoryControlStore


def test_default_policy_is_ten_retries_five_linear_then_exponential() -> None:
    policy = RetryPolicy()
    assert policy.attempts_allowed == 11
    delays = [policy.delay_ms(n) for n in range(1, 11)]
    assert delays[:5] == [30_000, 60_000, 90_000, 120_000, 150_000]
    assert delays[5:] == [300_000, 600_000, 1_200_000, 2_400_000, 4_800_000]


def test_policy_kinds() -> None:
    assert [RetryPolicy.constant(500).delay_ms(n) for n in (1, 2, 9)] == [500, 500, 500]
    assert [RetryPolicy.linear(100).delay_ms(n) for n in (1, 2, 3)] == [100, 200, 300]
    assert [RetryPolicy.exponential(100, factor=3).delay_ms(n) for n in (1, 2, 3)] == [100, 300, 900]
    custom = RetryPolicy.custom([5, 50])
    assert custom.retries == 2
    assert [custom.delay_ms(n) for n in (1, 2, 3)] == [5, 50, 50]
    capped = RetryPolicy.exponential(1000, max_delay_ms=5000)
    assert backoff_delay_ms(capped, 10) == 5000


def test_policy_round_trips_and_rejects_nonsense() -> None:
    policy = RetryPolicy.custom([1, 2, 3], retries=7)
    assert RetryPolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(ValueError):
        RetryPolicy(kind="fibonacci")
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)
    with pytest.raises(ValueError):
        RetryPolicy(kind="custom")


def test_delay_tables_kept_are_bounded_however_many_policies_are_seen() -> None:
    """A server that meets many policies keeps the tables of the latest."""
    policies = [RetryPolicy.constant(1000 + i) for i in range(1000)]
    tables = [delay_table(p) for p in policies]
    assert tables[-1] == (1999,)
    assert delay_table.cache_info().currsize <= 256
    assert delay_table(policies[-1]) is tables[-1]  # the latest, still kept


def test_descriptor_round_trip_and_errors() -> None:
    d = JobDescriptor.parse("fanout_pin:sr1:p2:42")
    assert (d.queue, d.shard, d.priority, d.local_id) == ("fanout_pin", "r1", 2, 42)
    assert str(d) == "fanout_pin:sr1:p2:42"
    for bad in ("", "q:r1:p1:1", "q:sr1:1:1", "q:sr1:p1:x", "bad-q:s1:p1:1", "q:sr1:p1:1:extra",
                # One job, one spelling: several would each be answered for it.
                "q:sr1:p1:01", "q:sr1:p01:1", "q:sr1:p1:00"):
        with pytest.raises(InvalidRequest):
            JobDescriptor.parse(bad)
    assert JobDescriptor.parse("q:sr1:p0:0").local_id == 0  # no job has it: answered unknown
    # An error repeats a bad descriptor's first characters only.
    with pytest.raises(InvalidRequest) as raised:
        JobDescriptor.parse("x" * 1_000_000)
    assert len(str(raised.value)) < 300 and "1000000 characters" in str(raised.value)
    # A dequeue writes its descriptors from the prefix: the same text.
    assert f"{descriptor_prefix('fanout_pin', 'r1')}2:42" == str(d)


def test_settings_from_env() -> None:
    settings = Settings.from_env(
        {
            "PINLATER_SHARDS": "r1=redis://127.0.0.1:1/0, m1=mysql://u:p@127.0.0.1:2/db",
            "PINLATER_ADMIN_SECRET": "secret",
            "PINLATER_MAX_BODY_BYTES": "10",
        }
    )
    assert [s.id for s in settings.shards] == ["r1", "m1"]
    assert settings.resolved_control_url == "redis://127.0.0.1:1/0"
    assert settings.max_body_bytes == 10
    assert settings.admin_secret_sha256 is not None and len(settings.admin_secret_sha256) == 64
    for bad in ("", "r1", "r1=ftp://x", "a=memory://,a=memory://", "a-b=memory://"):
        with pytest.raises(ValueError):
            parse_shards(bad)


def test_continuation_cursor_per_source() -> None:
    key = cont.ScanKey(1000, "r2", 2, 17)
    assert cont.decode(key.encode()) == key
    assert cont.decode("0") is None
    assert cont.source_cursor(key, "r2", 2) == (1000, 17)
    assert cont.source_cursor(key, "r1", 3) == (1000, 2**63 - 1)  # sorts lower: ties still to come
    assert cont.source_cursor(key, "r3", 1) == (1000, 0)  # sorts higher: ties already passed
    for bad in ("-1", "x:y", "1:r-1:2:3", "a:b:c:d"):
        with pytest.raises(ContinuationInvalid):
            cont.decode(bad)


def test_queue_config_json_and_validation() -> None:
    config = QueueConfig("q1", priorities=2, max_dequeue_rate=5, retry=RetryPolicy.linear(10))
    assert QueueConfig.from_json(config.to_json()) == config
    assert config.with_changes(paused=True).effective_rate == 0
    assert config.effective_rate == 5
    with pytest.raises(ValueError):
        QueueConfig("q1", max_dequeue_rate=-1)
    with pytest.raises(ValueError):
        QueueConfig("q1", priorities=0)


def test_per_key_limits_round_trip_and_refuse_what_is_not_a_limit() -> None:
    config = QueueConfig("q1", key_max_running=2, key_rate=0.5)
    assert QueueConfig.from_json(config.to_json()) == config
    plain = QueueConfig("q1")
    assert "key_" not in plain.to_json()  # stored as before when unset
    for bad in (0, -1, 2.5, True, MAX_RUNNING_CAP + 1, "2"):
        with pytest.raises(ValueError, match=r"^key_max_running must be a whole number"):
            QueueConfig("q1", key_max_running=bad)  # type: ignore[arg-type]
    for bad in (0, -1.0, math.nan, math.inf, True, MAX_DEQUEUE_RATE * 2, "1"):
        with pytest.raises(ValueError, match=r"^key_rate must be a finite number"):
            QueueConfig("q1", key_rate=bad)  # type: ignore[arg-type]


def test_states_and_error_codes() -> None:
    assert JobState.parse("in_progress") is JobState.RUNNING
    assert JobState.parse("2") is JobState.SUCCEEDED
    with pytest.raises(ValueError):
        JobState.parse("done")
    assert int(JobState.FAILED) == 3
    err = error_for_code(413, "nope")
    assert isinstance(err, QueueNotFound) and err.code is ErrorCode.QUEUE_NOT_FOUND


def test_the_config_cache_checks_names_it_does_not_hold() -> None:
    # A cached read skips the name check: names that were never cached still
    # get it, whatever their type, and a cached queue is read as before.
    control = MemoryControlStore()
    control.create_queue(QueueConfig(name="q1"))
    cache = QueueConfigCache(control, ttl_s=60.0)
    assert cache.get("q1").name == "q1"
    assert cache.get("q1") is cache.get("q1")
    for bad in ("bad-name", "", ["q1"], None, 7):
        with pytest.raises(QueueNameInvalid):
            cache.get(bad)  # type: ignore[arg-type]
    with pytest.raises(QueueNotFound):
        cache.get("q2")
