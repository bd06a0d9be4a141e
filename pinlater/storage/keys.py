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
``pl:{queue}:p{N}:j:{id}``         hash per job (see JOB_FIELDS)
``pl:layout``                      the shard's layout version (see
                                   ``pinlater.storage.layout``)

A job is a member of exactly one of its priority's four zsets, the one of its
state, so a zset's score is always the job's sort time. Members are the local
id zero-padded to 20 digits: among equal scores Redis orders members
lexicographically, and with fixed-width digits that is numeric order, which
makes (score, member) order == (sort_time, local_id) order, exactly.

Control store (``plc:``):

``plc:queues``                     hash name -> QueueConfig JSON
``plc:rate:{bucket}``              hash tokens, ts (rate buckets)
``plc:counts:{minute}``            hash ``queue:event`` -> n (event counters)
``plc:idem:{key}``                 string, idempotency key of an enqueue
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
SHARD_LAYOUT = "pl:layout"
CONTROL_QUEUES = "plc:queues"
CONTROL_LAYOUT = "plc:layout"
IDEMPOTENCY_PREFIX = "plc:idem:"

MEMBER_WIDTH = 20

# Hash fields of a job, in the order the read paths request them.
JOB_FIELDS = (
    "state",
    "attempts_allowed",
    "attempts_remaining",
    "custom_status",
    "created_at",
    "run_after",
    "updated_at",
    "claim",
)
BODY_FIELD = "body"

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


def job_prefix(queue: str, priority: int) -> str:
    """Scripts append a job's id (unpadded decimal) to get its hash key."""
    return f"pl:{queue}:p{priority}:j:"


def job_key(queue: str, priority: int, local_id: int) -> str:
    return f"{job_prefix(queue, priority)}{local_id}"


def member(local_id: int) -> str:
    """The zset member of a job: its id zero-padded (see module doc)."""
    return f"{local_id:0{MEMBER_WIDTH}d}"


def rate_key(bucket: str) -> str:
    return f"plc:rate:{bucket}"


def counts_key(minute: int) -> str:
    return f"plc:counts:{minute}"


def idempotency_key(key: str) -> str:
    return IDEMPOTENCY_PREFIX + key


def records_log_key(log: str) -> str:
    return f"pld:log:{log}"


def records_map_key(table: str) -> str:
    return f"pld:map:{table}"
