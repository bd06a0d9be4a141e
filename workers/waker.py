"""Wake-ups, sent by the publishing thread without waiting for the reply.

After an enqueue the publisher owes the queue's idle consumers a wake-up on
the queue's channel. Two things keep that cheap:

* At most one PUBLISH per queue every ``COALESCE_S`` from a process: the
  first publish after a quiet spell wakes at once; the others of the
  window send nothing. The consumers cover them: a consumer claims when a
  wake-up comes and once more ``COALESCE_S`` (plus ``RECHECK_SLACK_S``)
  after it, so a job whose wake-up was coalesced away (enqueued before its
  window closed) is claimed by then (``workers.channel``).
* The PUBLISH goes out on a connection of its own and its reply is read
  only on a later send, so a wake-up costs the publisher one write and no
  round trip. No thread: a sender thread takes the GIL from the publisher
  at every send and costs more wall time than it saves.

A wake-up that cannot be sent (Redis down) is logged and dropped: it only
costs latency, the consumers' slow poll finds the job.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import redis

log = logging.getLogger(__name__)

# Least time between two wake-ups of a queue from one process.
COALESCE_S = 0.005
# Consumers claim again this long after the end of a wake-up's window:
# covers the time the wake-up spent on the way.
RECHECK_SLACK_S = 0.002
# Sends whose replies may wait unread before a send waits for one.
MAX_UNREAD = 64


class _Sender:
    """A connection of its own to the bus's Redis that sends PUBLISH
    commands and reads their replies later."""

    def __init__(self, bus: Any) -> None:
        pool = bus.connection_pool
        # No health checks: a PING would read a PUBLISH's reply as its own.
        kwargs = dict(pool.connection_kwargs, health_check_interval=0)
        self._conn = pool.connection_class(**kwargs)
        self._unread = 0

    def publish(self, channel: str) -> None:
        try:
            self._send(channel)
        except (redis.RedisError, OSError):
            # Most likely a connection the server closed while idle: once
            # more on a new one (a PUBLISH sent twice is harmless).
            self.close()
            self._send(channel)

    def _send(self, channel: str) -> None:
        conn = self._conn
        while self._unread and (self._unread >= MAX_UNREAD or conn.can_read(timeout=0)):
            conn.read_response()
            self._unread -= 1
        if not self._unread and conn.is_connected and conn.can_read(timeout=0):
            # Readable with no reply owed: the server closed the connection
            # (a write to it would vanish without an error).
            raise redis.ConnectionError("wake-up connection closed by the server")
        conn.send_command("PUBLISH", channel, b"", check_health=False)
        self._unread += 1

    def close(self) -> None:
        self._unread = 0
        self._conn.disconnect()


class Waker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # channel -> monotonic time of its last send
        self._senders: dict[int, tuple[Any, _Sender]] = {}  # id(bus client) -> (client, sender)

    def wake(self, bus: Any, channel: str) -> None:
        now = time.monotonic()
        last = self._last.get(channel)
        if last is not None and now - last < COALESCE_S:
            return
        with self._lock:
            last = self._last.get(channel)
            if last is not None and now - last < COALESCE_S:
                return
            self._last[channel] = now
            entry = self._senders.get(id(bus))
            if entry is None or entry[0] is not bus:
                entry = self._senders[id(bus)] = (bus, _Sender(bus))
            try:
                entry[1].publish(channel)
            except (redis.RedisError, OSError) as exc:
                entry[1].close()
                log.warning("wake-up not sent (consumers' slow poll will find the job): %s", exc)

    def reset(self) -> None:
        """Forgets the connections (after a fork: they are the parent's)."""
        self._lock = threading.Lock()
        self._last = {}
        self._senders = {}


WAKER = Waker()
os.register_at_fork(after_in_child=WAKER.reset)
