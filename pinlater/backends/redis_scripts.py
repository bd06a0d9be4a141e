"""The Lua scripts of the Redis backend and decoding their replies.

Each script is a ``.lua`` file next to this module (``lua/``), loaded by
``pinlater.storage.scripts``. ``_prelude.lua`` is prepended to every job
script so helpers (clock, job keys, status caps) exist in one copy only.

Batch scripts take their items as one JSON argument (decoded by the cjson
library built into Redis) plus bodies as separate binary arguments: packing
hundreds of small arguments cost more client time than the script itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pinlater.backends.base import ClaimedJob, Claims, JobRecord
from pinlater.states import JobState
from pinlater.storage import keys, scripts

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

JOB_SCRIPTS = (
    "enqueue",
    "dequeue",
    "ack_succeeded",
    "ack_failed",
    "checkpoint",
    "expire_claims",
    "gc",
    "retry_failed",
    "delete",
    "count",
    "scan",
    "create_queue",
    "delete_queue",
)


def job_script_source(name: str) -> str:
    return scripts.checked_source("pinlater.backends", name, prelude="_prelude")


def register_job_scripts(client: redis.Redis[bytes]) -> dict[str, Script]:
    return scripts.register(client, "pinlater.backends", JOB_SCRIPTS, prelude="_prelude")


# -- replies -------------------------------------------------------------------


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8")


def _int(value: bytes | int | None) -> int:
    return 0 if value is None else int(value)


def member_id(member: bytes) -> int:
    return int(member)


def claims(reply: Sequence[Any], claim: str) -> Claims:
    """Decode dequeue's reply: next priority (0: none), then per job
    priority, id, body, allowed, remaining."""
    jobs = [
        ClaimedJob(
            local_id=int(reply[i + 1]),
            priority=int(reply[i]),
            body=bytes(reply[i + 2]),
            attempts_allowed=_int(reply[i + 3]),
            attempts_remaining=_int(reply[i + 4]),
            claim=claim,
        )
        for i in range(1, len(reply), 5)
    ]
    return Claims(jobs, int(reply[0]) or None)


def job_record(local_id: int, priority: int, fields: Sequence[Any], include_body: bool) -> JobRecord | None:
    """Decode HMGET of keys.JOB_FIELDS (+ body); None if the job is unknown."""
    if fields[0] is None:
        return None
    state = JobState(int(fields[0]))
    claim = _text(fields[7])
    return JobRecord(
        local_id=local_id,
        priority=priority,
        state=state,
        attempts_allowed=_int(fields[1]),
        attempts_remaining=_int(fields[2]),
        custom_status=_text(fields[3]),
        created_at_ms=_int(fields[4]),
        run_after_ms=_int(fields[5]),
        updated_at_ms=_int(fields[6]),
        claim=claim if state is JobState.RUNNING else None,
        body=bytes(fields[8] or b"") if include_body else None,
    )


def job_fields(include_body: bool) -> list[str]:
    return [*keys.JOB_FIELDS, keys.BODY_FIELD] if include_body else list(keys.JOB_FIELDS)
