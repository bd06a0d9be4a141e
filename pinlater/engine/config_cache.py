"""Queue configs as the job service reads them: from the control store,
cached per process for ``ttl_s`` so that a hot path (every enqueue, dequeue
and ACK needs its queue's config) does not cost a control-store round trip,
while a change by any process is seen everywhere within that time."""

from __future__ import annotations

import logging
import threading
import time

from pinlater.engine.control_backoff import ControlBackoff
from pinlater.errors import QueueNotFound, ShardConnectionFailed
from pinlater.queue_config import QueueConfig, validate_queue_name
from pinlater.stores.control import ControlStore

log = logging.getLogger(__name__)


class QueueConfigCache:
    def __init__(self, control: ControlStore, ttl_s: float, backoff: ControlBackoff | None = None) -> None:
        self._control = control
        self._ttl_s = ttl_s
        self._backoff = backoff or ControlBackoff()
        self._cache: dict[str, tuple[float, QueueConfig]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, *, fresh: bool = False) -> QueueConfig:
        """The queue's config: cached unless ``fresh``; QueueNotFound if it
        does not exist. While the control store is unreachable, the last
        known config is used."""
        now = time.monotonic()
        if not fresh:
            # A name in the cache was valid when it went in: only a miss
            # checks it (every dequeue, ACK and task start reads a config).
            # One dict read is atomic: no lock.
            cached = self._cache.get(name) if isinstance(name, str) else None
            if cached is not None and now - cached[0] < self._ttl_s:
                return cached[1]
        validate_queue_name(name)
        with self._lock:
            stale = self._cache.get(name)
        # Keep working on the last known config while the control store is
        # away, without waiting on it each time (ControlBackoff).
        if stale is not None and not fresh and self._backoff.skip():
            return stale[1]
        try:
            config = self._control.get_queue(name)
        except ShardConnectionFailed as exc:
            self._backoff.failed(exc)
            if stale is None:
                raise
            log.debug("control store unreachable, using the cached config of %s: %s", name, exc)
            return stale[1]
        self._backoff.ok()
        if config is None:
            self.forget(name)
            if stale is not None:
                # Known here a moment ago: deleted by another process, or a
                # control store that came back without its data.
                raise QueueNotFound(f"queue {name!r} is no longer in the control store: it was deleted, or the "
                                    "control store lost its data (`pinlater restore-queues` lists the queues whose "
                                    "jobs the shards still hold)")
            raise QueueNotFound(f"queue {name!r} does not exist (create it first)")
        with self._lock:
            self._cache[name] = (now, config)
        return config

    def forget(self, name: str) -> None:
        """After this process changed the queue: the next read is fresh."""
        with self._lock:
            self._cache.pop(name, None)
