"""The Redis backend's job records (layout 3), read in Python.

A job is one field of its priority's jobs hash (``keys.jobs_key``): the
field is the job's member (``keys.member``), the value packs the job::

    header   24 bytes, unsigned big-endian: state + flags (1),
             attempts_allowed (2), attempts_remaining (2), created_at (6),
             updated_at (6), run_after (7); times in ms since the epoch
    claim    if flag 4: length (2) + 'TOKEN@source', only while RUNNING
    status   if flag 8: length (2) + the custom status, UTF-8
    trace    if flag 16: length (1) + the W3C traceparent the job was
             enqueued under (written from layout 4 on)
    key      if flag 32: length (1) + the fairness key, UTF-8 (written
             from layout 5 on)
    body     the rest

The scripts write it (``lua/_prelude.lua`` has the writer); lookup and scan
decode it here. Fields that are usually absent cost nothing, and a pending
job with no custom status is its body plus 24 bytes.
"""

from __future__ import annotations

import struct

from pinlater.states import JobState
from pinlater.stores.base import JobRecord

HEADER_LEN = 24
FLAG_CLAIM = 4
FLAG_STATUS = 8
FLAG_TRACE = 16
FLAG_KEY = 32
_FIXED = struct.Struct(">BHH")


def _uint(raw: bytes, start: int, size: int) -> int:
    return int.from_bytes(raw[start : start + size], "big")


def decode(local_id: int, priority: int, raw: bytes | None, include_body: bool) -> JobRecord | None:
    """The job whose value is ``raw`` (None: no such job). Without
    ``include_body`` the value may stop where the body starts."""
    if raw is None:
        return None
    flags, allowed, remaining = _FIXED.unpack_from(raw)
    at = HEADER_LEN
    claim = None
    status = ""
    if flags & FLAG_CLAIM:
        n = _uint(raw, at, 2)
        claim = raw[at + 2 : at + 2 + n].decode("utf-8")
        at += 2 + n
    if flags & FLAG_STATUS:
        n = _uint(raw, at, 2)
        status = raw[at + 2 : at + 2 + n].decode("utf-8")
        at += 2 + n
    if flags & FLAG_TRACE:
        at += 1 + raw[at]
    key = ""
    if flags & FLAG_KEY:
        n = raw[at]
        key = raw[at + 1 : at + 1 + n].decode("utf-8")
        at += 1 + n
    state = JobState(flags & 3)
    return JobRecord(
        local_id=local_id,
        priority=priority,
        state=state,
        attempts_allowed=allowed,
        attempts_remaining=remaining,
        custom_status=status,
        created_at_ms=_uint(raw, 5, 6),
        run_after_ms=_uint(raw, 17, 7),
        updated_at_ms=_uint(raw, 11, 6),
        claim=claim if state is JobState.RUNNING else None,
        body=bytes(raw[at:]) if include_body else None,
        key=key,
    )
