"""Cancel while one shard fails: the jobs on the healthy shard are
cancelled, those on the failing one are reported unapplied with the cause
(nothing raised), and a job named twice is answered once."""

from __future__ import annotations

from collections.abc import Sequence

from pinlater import Job, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.engine.core import Core
from pinlater.engine.shards import ShardSet
from pinlater.models import CancelResult
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.stores.base import Cancelled, ShardUnavailable
from pinlater.stores.memory.control import MemoryControlStore
from pinlater.stores.memory.shard import MemoryBackend

Q = "q"


class Refusing(MemoryBackend):
    """A memory shard whose cancels fail as an unreachable shard's do."""

    def cancel(self, queue: str, priority: int, local_ids: Sequence[int], status: str) -> list[Cancelled]:
        raise ShardUnavailable(f"shard {self.shard_id} unavailable: connection refused")


def test_a_failing_shard_leaves_its_jobs_unapplied_and_the_rest_cancelled() -> None:
    good, bad = MemoryBackend("m1"), Refusing("m2")
    service = JobService(Core.build(ShardSet([good, bad], probe_interval_s=3600), MemoryControlStore(), Settings()),
                         source="t", owns_core=True)
    try:
        service.create_queue(Q)
        jobs: list[str] = []
        while {JobDescriptor.parse(d).shard for d in jobs} != {"m1", "m2"}:
            jobs += service.enqueue(Q, [Job(b"x")])
        on_good = [d for d in jobs if JobDescriptor.parse(d).shard == "m1"]
        on_bad = [d for d in jobs if JobDescriptor.parse(d).shard == "m2"]
        result = service.cancel(Q, [*jobs, jobs[0]])
        assert isinstance(result, CancelResult)
        assert sorted(result.cancelled) == sorted(on_good)
        assert sorted(result.unapplied) == sorted(on_bad)
        assert all("connection refused" in why for why in result.unapplied.values())
        assert {service.lookup([d])[d].state for d in on_good} == {JobState.FAILED}
        assert {service.lookup([d])[d].state for d in on_bad} == {JobState.PENDING}
    finally:
        service.close()
