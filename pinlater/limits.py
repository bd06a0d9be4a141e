"""The service's hard limits on input, defined once.

Every entry point (Python API, Thrift server, CLI, dashboard) checks against
these, so a value is accepted or refused the same way everywhere. The
configurable limits (body size, jobs per call, regex budget, server
connection and buffer caps) live in ``pinlater.settings.Settings``.
"""

from __future__ import annotations

# Timestamps and delays reach Redis as Lua numbers (IEEE doubles): integers
# above 2**53 - 1 are not exact there, and i64 values of 2**63 and above do
# not fit MySQL's BIGINT. 2**53 - 1 ms is the year 287,396: a far-future
# "never" fits, and every backend stores it exactly.
MAX_TIMESTAMP_MS = 2**53 - 1
# A retry delay is added to the shard's clock: 100 years keeps now + delay
# far below MAX_TIMESTAMP_MS.
MAX_DELAY_MS = 100 * 365 * 86_400_000
# Claim timeouts and retention are durations too.
MAX_DURATION_MS = MAX_DELAY_MS
# Jobs per second across every dequeuer; above this a limit means nothing.
MAX_DEQUEUE_RATE = 1e9
# The slowest rate above 0 (one job in about 11.6 days): the wait a limited
# dequeue answers, 1000 / rate ms, stays a whole number a client can read.
MIN_DEQUEUE_RATE = 1e-6
# Priorities per queue.
MAX_PRIORITIES = 100
# A queue's concurrency cap (QueueConfig.max_running): a lease per running
# job is kept in the control store, so the cap bounds that store's size too.
MAX_RUNNING_CAP = 1_000_000
# A job's fairness key, in UTF-8 bytes (one length byte in a Redis record).
MAX_KEY_BYTES = 64
# A job's unique key (Job.unique), in UTF-8 bytes: a MySQL primary key
# column with the queue's name, well inside InnoDB's 3072-byte key limit.
MAX_UNIQUE_KEY_BYTES = 200
# An enqueue's idempotency key, in characters.
MAX_IDEMPOTENCY_KEY_LEN = 200
# Bodies of the largest size (PINLATER_MAX_BODY_BYTES) that one request
# frame has room for (the Thrift server's default max frame), and so, by
# default, that one lookup or scan may return: a client can read back in
# one call what it could write in one.
FRAME_BODIES = 16
# The most body bytes one lookup or scan may ever return: the Thrift client
# accepts replies of up to 512 MiB, and the rest of a reply (descriptors,
# custom statuses, claims of up to 10,000 jobs) takes at most ~170 MB.
MAX_READ_BYTES = 256 * 1024 * 1024
