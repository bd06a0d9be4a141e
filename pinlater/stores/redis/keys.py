"""Every Redis key name of the project (job shards, control store, dashboard
records), in one place.

Job storage (one shard = one Redis server/db):

``pl:queues``                      set of queue names with storage here
``pl:{queue}:ids``                 id counter (INCRBY); ids are unique per
                                   queue on the shard, so also per priority
``pl:{queue}:prios``               set of priorities ever given storage; lets
                                   delete_queue find every key without SCAN
``pl:{queue}:p{N}:pending``        zset, score run_after
``pl:{queue}:p{N}:running``        zset, score updated_at (claim/heartbeat)
``pl:{queue}:p{N}:succeeded``      zset, score updated_at (finish time)
``pl:{queue}:p{N}:failed``         zset, score updated_at (finish time)
``pl:{queue}:p{N}:jobs``           hash, member -> the job (one field per
                                   job: ``pinlater.stores.redis.record``)
``pl:{queue}:p{N}:owners``         hash, member -> claim token, NUL, fairness
                                   key, of the RUNNING jobs over 256 bytes of
                                   a queue with a cap (``owners_of`` in
                                   ``lua/_prelude.lua``): what its claims are
                                   counted from, a few bytes a job
``pl:{queue}:p{N}:turns``          list of lanes in turn (fair service between
                                   fairness keys: ``lua/_prelude.lua``); the
                                   lanes exist from the priority's first keyed
                                   pending job until every lane is empty
``pl:{queue}:p{N}:inturn``         set, the lanes in turns
``pl:{queue}:p{N}:waits``          zset, lane -> its first job's run_after
``pl:{queue}:p{N}:lane:{key}``     zset, the key's pending jobs (score
                                   run_after); jobs without a key are in no
                                   lane zset (lane '' is the pending zset
                                   less the keyed index)
``pl:{queue}:p{N}:keyed``          zset, every keyed pending job as its
                                   run_after (16 digits) then its member,
                                   score 0: in lex order as in pending
``pl:{queue}:unique``              hash of the queue's unique keys (Job.unique):
                                   ``k{key}`` -> ``P:ID`` of the job that took
                                   it, held while that job is; ``@`` -> the
                                   cursor of the sweep that removes entries
                                   whose jobs left storage (``lua/_prelude.lua``)
``pl:deleted``                     set of queue names deleted here and not
                                   created again since: an enqueue of a
                                   process whose cached config is stale is
                                   refused instead of storing an orphan
``pl:layout``                      the shard's layout version (see
                                   ``pinlater.stores.layout``)
``pl:probe``                       string written by the health prober to
                                   see that the shard takes writes; expires
                                   after ``PROBE_TTL_MS``

A job is a member of exactly one of its priority's four zsets, the one of its
state, so a zset's score is always the job's sort time. A job's member (in
its zset and as its field in the jobs hash) is its local id in as few
big-endian bytes as it takes, after one byte giving that count: among equal
scores Redis orders members bytewise, and with the count first that is
numeric order, which makes (score, member) order == (sort_time, local_id)
order, exactly. Short members are most of what keeps a job small: an id
below 2**40 takes 6 bytes, within jemalloc's smallest size class.

(Layout 2 and earlier kept a hash per job, ``pl:{queue}:p{N}:j:{id}``, and
members zero-padded to 20 digits; ``pinlater migrate`` converts them.)

Control store (``plc:``):

``plc:queues``                     hash name -> QueueConfig JSON
``plc:rate:{bucket}``              hash tokens, ts (rate buckets)
``plc:held:{queue}``               hash ``#`` -> total, owner -> held
                                   (concurrency slots: ``lua/slots_*.lua``)
``plc:synced:{queue}``             zset owner -> ms it last synced
``plc:kheld:{queue}``              hash owner NUL key -> held; ``#`` NUL key and
                                   owner NUL -> totals (per-key slots:
                                   ``lua/key_slots_*.lua``)
``plc:ksynced:{queue}``            zset owner -> ms it last synced (per-key slots)
``plc:counts:{minute}``            hash ``queue:event`` -> n (event counters)
``plc:idem:{key}``                 string, idempotency key of an enqueue
``plc:batch:{id}``                 hash, a batch: doc, state, total, ok, failed,
                                   created, updated (``stores.redis.batches``)
``plc:batch:{id}:jobs``            hash, its jobs: descriptor -> '', 'S' or 'F'
``plc:batchof``                    hash, descriptor -> the batch it is in
``plc:batches``                    zset, every batch by the ms it last changed
``plc:batches:live``               zset, the same for open, sealed, complete
``plc:layout``                     the control store's layout version

Dashboard records (``pld:``, beside the control store):

``pld:log:{name}``                 list of JSON documents, newest first
``pld:map:{name}``                 hash key -> JSON document

(The Celery layer's pub/sub channels are not keys: ``workers.bus`` names
them, under a prefix of its own.)


Queue names are letters, digits and underscore only, so ``:`` never occurs
inside one and no queue's keys can collide with another's.
"""

from __future__ import annotations

from pinlater.states import JobState

QUEUES = "pl:queues"
DELETED_QUEUES = "pl:deleted"
SHARD_LAYOUT = "pl:layout"
PROBE = "pl:probe"
STORE_ID = "pl:store_id"
PROBE_TTL_MS = 10_000
CONTROL_QUEUES = "plc:queues"
CONTROL_LAYOUT = "plc:layout"
IDEMPOTENCY_PREFIX = "plc:idem:"

_STATE_SUFFIX = {
    JobState.PENDING: "pending",
    JobState.RUNNING: "running",
    JobState.SUCCEEDED: "succeeded",
    JobState.FAILED: "failed",
}


def ids_key(queue: str) -> str:
    return f"pl:{queue}:ids"


def prios_key(queue: str) -> str:
    return f"pl:{queue}:prios"


def state_key(queue: str, priority: int, state: JobState) -> str:
    return f"pl:{queue}:p{priority}:{_STATE_SUFFIX[state]}"


def pending_key(queue: str, priority: int) -> str:
    return state_key(queue, priority, JobState.PENDING)


def running_key(queue: str, priority: int) -> str:
    return state_key(queue, priority, JobState.RUNNING)


def succeeded_key(queue: str, priority: int) -> str:
    return state_key(queue, priority, JobState.SUCCEEDED)


def failed_key(queue: str, priority: int) -> str:
    return state_key(queue, priority, JobState.FAILED)


def jobs_key(queue: str, priority: int) -> str:
    return f"pl:{queue}:p{priority}:jobs"


# A member is at most 8 bytes (valid_member in lua/_prelude.lua): ids
# from 2**56 on cannot be written, so no job has one.
ID_LIMIT = 2**56


def can_exist(local_id: int) -> bool:
    """Whether a job may have this id: a caller may name any other, which
    is then no job, never a script's error (a shard's health counts those)."""
    return 1 <= local_id < ID_LIMIT


def member(local_id: int) -> bytes:
    """A job's zset member and jobs-hash field (see module doc); ids start
    at 1."""
    if local_id < 1:
        raise ValueError(f"no job has id {local_id}")
    n = (local_id.bit_length() + 7) // 8
    return bytes((n,)) + local_id.to_bytes(n, "big")


def member_id(member: bytes) -> int:
    return int.from_bytes(member[1:], "big")


def rate_key(bucket: str) -> str:
    return f"plc:rate:{bucket}"


def slots_key(queue: str) -> str:
    return f"plc:held:{queue}"


def slots_at_key(queue: str) -> str:
    return f"plc:synced:{queue}"


def key_slots_key(queue: str) -> str:
    return f"plc:kheld:{queue}"


def key_slots_at_key(queue: str) -> str:
    return f"plc:ksynced:{queue}"


def counts_key(minute: int) -> str:
    return f"plc:counts:{minute}"


def idempotency_key(key: str) -> str:
    return IDEMPOTENCY_PREFIX + key


def records_log_key(log: str) -> str:
    return f"pld:log:{log}"


def records_map_key(table: str) -> str:
    return f"pld:map:{table}"


BATCH_OF = "plc:batchof"
BATCHES = "plc:batches"
LIVE_BATCHES = "plc:batches:live"
DONE_BATCHES = "plc:batches:done"


def batch_key(batch: str) -> str:
    return f"plc:batch:{batch}"


def batch_jobs_key(batch: str) -> str:
    return f"plc:batch:{batch}:jobs"
