"""The job-service client of a process: one per process and settings,
shared by every Kombu connection in it (the producer pool, the consumer,
the event dispatcher) and made again after a fork.

``pinlater.connect`` gives the in-process ``JobService``, or the Thrift
client when ``PINLATER_SERVERS`` is set; the transport only uses the
client interface both share.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid

from pinlater import connect
from pinlater.client_api import PinLaterClient
from pinlater.queue_config import QueueConfig
from pinlater.settings import Settings
from workers import registry
from workers.pid import current_pid

log = logging.getLogger(__name__)
_lock = threading.Lock()
_clients: dict[tuple[int, Settings], PinLaterClient] = {}
_source: tuple[int, str] | None = None


def process_source() -> str:
    """The claim source of this process: dequeues, ACKs and checkpoints must
    all give it. New per process (a restarted worker never owns the claims
    of the one it replaces), and handed to pool processes in the message so
    their heartbeats count for the claim."""
    global _source
    pid = current_pid()
    known = _source
    if known is not None and known[0] == pid:
        return known[1]
    with _lock:
        if _source is None or _source[0] != pid:
            _source = (pid, f"celery@{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:6]}")
        return _source[1]


def shared_client(settings: Settings) -> PinLaterClient:
    key = (current_pid(), settings)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = connect(settings, source=None)
            _clients[key] = client
        return client


def ensure_queue(client: PinLaterClient, queue: str) -> QueueConfig:
    """Creates the queue with its task's defaults if missing (idempotent:
    an existing queue keeps the config its operators gave it)."""
    spec = registry.spec_for(queue)
    create = dict(spec.create if spec else {})
    priorities = registry.priorities_for(queue)
    if priorities is not None:
        create["priorities"] = priorities
    config = client.create_queue(queue, **create)
    if priorities is not None and config.priorities < priorities:
        log.warning("queue %s has %d priorities, fewer than its max_priority asks for (%d): Kombu priorities "
                    "share them, in order", queue, config.priorities, priorities)
    return config


def queue_config(client: PinLaterClient, queue: str) -> QueueConfig:
    """The queue's config as its operators set it; both clients cache it
    for ``config_ttl_s``, so a change reaches every worker within that."""
    return client.queue_config(queue)
