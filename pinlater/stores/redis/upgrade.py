"""``pinlater migrate``'s steps of Redis stores that write data.

Shard layout 2 to 3: every job
from its own hash (``pl:{queue}:p{N}:j:{id}``, 20-digit members) into one
field of its priority's jobs hash (``record``), short members.

Every job is in exactly one state zset of its priority, and every priority
that ever held a job is in ``pl:{queue}:prios``, so walking those zsets
reaches every job without SCAN. Each call of ``upgrade_v3.lua`` converts a
window of ``BATCH`` members atomically, job by job complete; jobs already
converted are skipped, so the step is idempotent and a re-run after a crash
resumes (it walks the zsets again but rewrites nothing done).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pinlater.states import JobState
from pinlater.stores.control import CANCELLED, RELEASED
from pinlater.stores.redis import keys, loader
from pinlater.stores.redis.scripts import UPGRADE_SCRIPTS

if TYPE_CHECKING:
    import redis

# Members per script call: a few ms of server time at most.
BATCH = 500


def upgrade_to_v3(client: redis.Redis[bytes]) -> None:
    [script] = loader.register(client, "pinlater.stores.redis", UPGRADE_SCRIPTS, prelude="_prelude").values()
    for raw_queue in sorted(client.smembers(keys.QUEUES)):
        queue = raw_queue.decode("utf-8")
        for priority in sorted(int(p) for p in client.smembers(keys.prios_key(queue))):
            old_prefix = f"pl:{queue}:p{priority}:j:"  # layout 2's job hashes, frozen here
            for state in JobState:
                ks = [keys.state_key(queue, priority, state), keys.jobs_key(queue, priority), old_prefix]
                start = 0
                while True:
                    seen, _converted, dropped = script(keys=ks, args=[start, BATCH], client=client)
                    if int(seen) == 0:
                        break
                    start += int(seen) - int(dropped)


def keyed_entry(run_after: int, member: bytes) -> bytes:
    """A keyed pending job's entry in its priority's keyed index, as the
    prelude's ``keyed_entry`` writes it: lex order is (run_after, id)."""
    return b"%016d" % run_after + member


def index_keyed_jobs(client: redis.Redis[bytes]) -> None:
    """Layout 5 -> 6: each priority that keeps lanes gets the index of its
    keyed pending jobs (``pl:{queue}:p{N}:keyed``) in place of lane ''s
    copy of the others (``pl:{queue}:p{N}:lane:``), which goes. Every keyed
    lane with jobs is in the priority's turns or waits, so they name every
    lane to index, read ``BATCH`` at a time; each window of ``BATCH`` jobs
    is one ZADD, and a re-run adds nothing twice."""
    for raw_queue in sorted(client.smembers(keys.QUEUES)):
        queue = raw_queue.decode("utf-8")
        for priority in sorted(int(p) for p in client.smembers(keys.prios_key(queue))):
            base = f"pl:{queue}:p{priority}:"
            for lanes_key, read in ((base + "turns", client.lrange), (base + "waits", client.zrange)):
                at = 0
                while lanes := read(lanes_key, at, at + BATCH - 1):
                    at += len(lanes)
                    for lane in lanes:
                        if lane:  # lane '' is in turns
                            _index_lane(client, base, lane)
            client.unlink(base + "lane:")


def _index_lane(client: redis.Redis[bytes], base: str, lane: bytes) -> None:
    lane_key = base.encode() + b"lane:" + lane
    start = 0
    while rows := client.zrange(lane_key, start, start + BATCH - 1, withscores=True):
        client.zadd(base + "keyed", {keyed_entry(int(score), m): 0 for m, score in rows})
        start += len(rows)


def index_done_batches(client: redis.Redis[bytes]) -> None:
    """Control store layout 2 -> 3: each released or cancelled batch into
    ``plc:batches:done``, scored as in ``plc:batches`` (every batch), which
    is read ``BATCH`` at a time; a re-run adds nothing twice."""
    start = 0
    while rows := client.zrange(keys.BATCHES, start, start + BATCH - 1, withscores=True):
        start += len(rows)
        pipe = client.pipeline(transaction=False)
        for member, _score in rows:
            pipe.hget(keys.batch_key(member.decode()), "state")
        ended = (RELEASED.encode(), CANCELLED.encode())
        done: dict[str | bytes, float] = {
            m: score for (m, score), state in zip(rows, pipe.execute(), strict=True) if state in ended}
        if done:
            client.zadd(keys.DONE_BATCHES, done)
