# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Broadcast traffic over Redis pub/sub: worker events, remote control,
replies, and the wake-ups of task queues. Transient by design: a message
reaches the processes subscribed when it is published, and no one else.

A binding is a subscription. A process that binds one of its transient
queues to an exchange subscribes to that exchange's channel (direct: one
channel per routing key; fanout: one channel; topic: a pattern), so the
binding table is shared through Redis itself and disappears with the
process: a publisher never looks bindings up, and there is nothing to
expire or sweep. Task queues never travel here: they are PinLater queues.

Channel names (``P`` is the bus prefix, which keeps apps apart, since
pub/sub ignores the Redis database number)::

    Pq:QUEUE            straight to a queue (the anonymous exchange)
    Pf:EXCHANGE         fanout exchange
    Pd:EXCHANGE|KEY     direct exchange, per routing key
    Pt:EXCHANGE|KEY     topic exchange (bound with PSUBSCRIBE)
    Pw:QUEUE            wake-up: a job was just enqueued on this PinLater queue
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import threading
import time
from collections import deque
from typing import Any

import redis
from kombu.transport.virtual.exchange import TopicExchange

log = logging.getLogger(__name__)

# A transient queue that is bound but never consumed must not grow forever.
BUFFER_MAX = 10_000
SUBSCRIBE_WAIT_S = 2.0
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


def _glob_escape(text: str) -> str:
    return _GLOB_SPECIAL.sub(r"\\\1", text)


class BusNames:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def queue(self, queue: str) -> str:
        return f"{self.prefix}q:{queue}"

    def wake(self, queue: str) -> str:
        return f"{self.prefix}w:{queue}"

    def exchange(self, exchange: str, type_: str, routing_key: str) -> str:
        if type_ == "fanout":
            return f"{self.prefix}f:{exchange}"
        kind = "t" if type_ == "topic" else "d"
        return f"{self.prefix}{kind}:{exchange}|{routing_key}"

    def topic_pattern(self, exchange: str, binding_key: str) -> str:
        # Words '*' and '#' both become the glob '*'; the exact AMQP match is
        # checked again on delivery (a glob '*' also crosses dots).
        words = ["*" if w in ("*", "#") else _glob_escape(w) for w in binding_key.split(".")]
        return _glob_escape(self.exchange(exchange, "topic", "")) + ".".join(words)


def encode_transient(message: dict[str, Any]) -> bytes:
    body = message.get("body")
    props = dict(message.get("properties") or {})
    if isinstance(body, bytes | bytearray):
        body = base64.b64encode(bytes(body)).decode()
        props["body_encoding"] = "base64"
    else:
        props["body_encoding"] = None
    return json.dumps({**message, "body": body, "properties": props}, default=str).encode()


def decode_transient(data: bytes) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(data)
    return message


class Subscriber:
    """The pub/sub side of one Kombu connection: which of this process's
    transient queues each subscription feeds, the messages waiting for
    them, and which task queues were woken."""

    def __init__(self, client: redis.Redis[bytes], names: BusNames) -> None:
        self._client = client
        self._names = names
        self._pubsub: Any = None
        self._lock = threading.RLock()
        self._channels: dict[str, set[str]] = {}
        self._patterns: dict[str, list[tuple[str, str, re.Pattern[str]]]] = {}
        self._wake: dict[str, str] = {}
        self.buffers: dict[str, deque[dict[str, Any]]] = {}
        self.woken: set[str] = set()

    # -- subscriptions -------------------------------------------------------------
    def add_queue(self, queue: str) -> None:
        with self._lock:
            self.buffers.setdefault(queue, deque(maxlen=BUFFER_MAX))
            self._subscribe(self._names.queue(queue), queue)

    def bind(self, queue: str, exchange: str, type_: str, routing_key: str) -> None:
        with self._lock:
            self.buffers.setdefault(queue, deque(maxlen=BUFFER_MAX))
            if type_ == "topic":
                pattern = self._names.topic_pattern(exchange, routing_key)
                regex = re.compile(TopicExchange(None).key_to_pattern(routing_key))
                entries = self._patterns.setdefault(pattern, [])
                if not any(q == queue for q, _, _ in entries):
                    entries.append((queue, self._names.exchange(exchange, "topic", ""), regex))
                if len(entries) == 1:
                    self._ensure_pubsub().psubscribe(pattern)
                    self._await_confirmation({pattern})
            else:
                self._subscribe(self._names.exchange(exchange, type_, routing_key), queue)

    def remove_queue(self, queue: str) -> None:
        with self._lock:
            self.buffers.pop(queue, None)
            gone = []
            for channel, queues in self._channels.items():
                queues.discard(queue)
                if not queues:
                    gone.append(channel)
            for channel in gone:
                del self._channels[channel]
            gone_patterns = []
            for pattern, entries in self._patterns.items():
                entries[:] = [e for e in entries if e[0] != queue]
                if not entries:
                    gone_patterns.append(pattern)
            for pattern in gone_patterns:
                del self._patterns[pattern]
            if self._pubsub is not None:
                if gone:
                    self._pubsub.unsubscribe(*gone)
                if gone_patterns:
                    self._pubsub.punsubscribe(*gone_patterns)

    def watch(self, queue: str) -> None:
        """Wake-ups of a PinLater queue this process consumes."""
        with self._lock:
            channel = self._names.wake(queue)
            if channel not in self._wake:
                self._wake[channel] = queue
                self._ensure_pubsub().subscribe(channel)
                self._await_confirmation({channel})

    def unwatch(self, queue: str) -> None:
        with self._lock:
            channel = self._names.wake(queue)
            if self._wake.pop(channel, None) is not None and self._pubsub is not None:
                self._pubsub.unsubscribe(channel)

    def _subscribe(self, channel: str, queue: str) -> None:
        queues = self._channels.setdefault(channel, set())
        queues.add(queue)
        if len(queues) == 1:
            self._ensure_pubsub().subscribe(channel)
            self._await_confirmation({channel})

    def _ensure_pubsub(self) -> Any:
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        return self._pubsub

    def _await_confirmation(self, names: set[str]) -> None:
        # A reply can follow a request within a millisecond: the binding
        # must be live in Redis before the caller publishes the request.
        deadline = time.monotonic() + SUBSCRIBE_WAIT_S
        waiting = set(names)
        while waiting and time.monotonic() < deadline:
            message = self._pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if message is None:
                continue
            if message["type"] in ("subscribe", "psubscribe"):
                name = message["channel"]
                waiting.discard(name.decode() if isinstance(name, bytes) else name)
            else:
                self._route(message)
        if waiting:
            log.warning("no confirmation from Redis for subscriptions %s", sorted(waiting))

    # -- reading -------------------------------------------------------------------
    def fileno(self) -> int | None:
        pubsub = self._pubsub
        connection = getattr(pubsub, "connection", None) if pubsub is not None else None
        sock = getattr(connection, "_sock", None) if connection is not None else None
        return sock.fileno() if sock is not None else None

    @property
    def active(self) -> bool:
        return self._pubsub is not None and bool(self._channels or self._patterns or self._wake)

    def read(self, timeout: float = 0.0) -> int:
        """Routes every message available now (waiting up to ``timeout`` for
        the first); returns how many arrived."""
        with self._lock:
            if not self.active:
                if timeout > 0:
                    time.sleep(timeout)
                return 0
            count = 0
            wait = timeout
            while True:
                message = self._pubsub.get_message(timeout=wait)
                if message is None:
                    return count
                wait = 0.0
                count += 1
                self._route(message)

    def _route(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind not in ("message", "pmessage"):
            return
        channel = message["channel"]
        channel = channel.decode() if isinstance(channel, bytes) else channel
        queue = self._wake.get(channel)
        if queue is not None:
            self.woken.add(queue)
            return
        try:
            payload = decode_transient(message["data"])
        except ValueError:
            log.warning("dropped an undecodable bus message on %s", channel)
            return
        if kind == "message":
            targets = set(self._channels.get(channel, ()))
        else:
            pattern = message["pattern"]
            pattern = pattern.decode() if isinstance(pattern, bytes) else pattern
            targets = {
                q for q, prefix, regex in self._patterns.get(pattern, ())
                if channel.startswith(prefix) and regex.match(channel[len(prefix):])
            }
        for queue in targets:
            buffer = self.buffers.get(queue)
            if buffer is not None:
                buffer.append(payload)

    def close(self) -> None:
        with self._lock:
            if self._pubsub is not None:
                with contextlib.suppress(redis.RedisError, OSError):
                    self._pubsub.close()
                self._pubsub = None
            self._channels.clear()
            self._patterns.clear()
            self._wake.clear()
            self.buffers.clear()
