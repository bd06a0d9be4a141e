"""Each store keeps an id of its own (``ShardBackend.store_id``). Two shard
ids whose URLs reach one store (a URL copied under two ids) are found at
the first probe and the later one is kept out of rotation, so no job is
served or counted twice; a store whose id changed (its data lost, or its
address reaching another store) is said to have at error."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import redis

from pinlater import Job, JobService
from pinlater.descriptor import JobDescriptor
from pinlater.engine.shards import SAME_STORE
from pinlater.settings import parse_shards
from tests.servers import REDIS_PORTS, REDIS_SHARD_DB, PrivateRedis, mysql_url, redis_url
from tests.support.kinds.mysql import DATABASES
from tests.support.stores import settings_for


@pytest.mark.parametrize("kind", ["redis", "mysql"])
def test_a_store_named_by_two_shard_ids_is_used_under_the_first_only(
    servers: None, queue_name: str, kind: str
) -> None:
    url = redis_url(REDIS_PORTS[0], REDIS_SHARD_DB) if kind == "redis" else mysql_url(DATABASES["d1"])
    settings = settings_for(kind, shards=parse_shards(f"a1={url},a2={url}"), health_probe_interval_s=3600)
    with JobService.from_settings(settings, source="same-store") as service:
        shards = service.core.shards
        shards.probe_once()
        status = service.operators.shard_status()
        assert status["a1"].healthy and not status["a2"].healthy, status
        assert status["a2"].out_reason == SAME_STORE
        assert "shard a2 is the store shard a1 is" in (status["a2"].last_error or "")
        service.create_queue(queue_name)
        stored = [d for _ in range(10) for d in service.enqueue(queue_name, [Job(b"x")])]
        assert {JobDescriptor.parse(d).shard for d in stored} == {"a1"}
        assert service.count(queue_name, "pending") == 10  # not twice over
        shards.probe_once()
        assert not shards.is_healthy("a2") and shards.is_healthy("a1")


def test_a_store_that_lost_its_data_is_said_to_have(
    servers: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private = PrivateRedis(tmp_path)
    private.start()
    try:
        url = redis_url(private.port, REDIS_SHARD_DB)
        settings = settings_for("redis", shards=parse_shards(f"r1={url}"), health_probe_interval_s=3600)
        with JobService.from_settings(settings, source="wiped") as service:
            service.core.shards.probe_once()
            before = service.core.shards.get("r1").store_id()
            admin = redis.Redis.from_url(url)
            admin.flushall()  # as a restart without its files would leave it
            admin.close()
            with caplog.at_level(logging.ERROR, logger="pinlater.engine.shards"):
                service.core.shards.probe_once()
            after = service.core.shards.get("r1").store_id()
            assert after != before and service.core.shards.is_healthy("r1")
            [said] = [r.getMessage() for r in caplog.records if "is not the store it was" in r.getMessage()]
            assert f"store id {before}, now {after}" in said and "lost its data" in said
    finally:
        private.stop()
