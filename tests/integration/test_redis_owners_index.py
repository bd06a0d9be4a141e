"""A Redis shard keeps its owners index (``pl:{queue}:p{N}:owners``: each
running job's claim token and key) for the queues whose running jobs the
monitor counts on every pass, those with a cap or a per-key cap, so that the
count reads a few bytes a job instead of every running body; a queue without
either pays nothing for it, nor do small jobs, which cost less to read."""

from __future__ import annotations

import uuid

import redis

from pinlater import Ack, Job, JobService
from pinlater.descriptor import JobDescriptor
from pinlater.stores.redis import keys
from tests.support.stores import settings_for


def test_the_dequeues_of_capped_queues_keep_the_index_and_others_do_not(servers: None) -> None:
    settings = settings_for("redis")
    raw = redis.Redis.from_url(settings.shards[0].url)
    name = f"owners_{uuid.uuid4().hex[:10]}"
    plain, capped, key_capped = (f"{name}_{what}" for what in ("plain", "capped", "keycap"))
    with JobService.from_settings(settings, source="owners-worker") as service:
        service.create_queue(plain)
        service.create_queue(capped)
        service.set_concurrency(capped, 5)
        service.create_queue(key_capped)
        service.set_key_concurrency(key_capped, 2)
        try:
            service.enqueue(capped, [Job(b"small", key="T") for _ in range(3)])
            small = service.dequeue(capped, 3)
            assert len(small) == 3 and not raw.exists(f"pl:{capped}:p1:owners")
            service.ack(capped, succeeded=[Ack(j.descriptor, claim=j.claim) for j in small])
            for queue in (plain, capped, key_capped):
                service.enqueue(queue, [Job(b"x" * 1000, key="T") for _ in range(3)])
            taken = {queue: service.dequeue(queue, 3) for queue in (plain, capped, key_capped)}
            assert not raw.exists(f"pl:{plain}:p1:owners")
            for queue, held in (capped, 3), (key_capped, 2):
                marks = raw.hgetall(f"pl:{queue}:p1:owners")
                ids = {keys.member(JobDescriptor.parse(j.descriptor).local_id) for j in taken[queue]}
                assert set(marks) == ids and len(ids) == held
                assert {m.split(b"\0")[1] for m in marks.values()} == {b"T"}
            for queue, jobs in taken.items():
                service.ack(queue, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs])
            assert not any(raw.exists(f"pl:{q}:p1:owners") for q in (plain, capped, key_capped))
        finally:
            for queue in (plain, capped, key_capped):
                service.delete_queue(queue, "secret")
            raw.close()
