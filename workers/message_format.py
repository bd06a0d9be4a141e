"""How a Celery message is stored as a PinLater job body, and back.

Layout (bytes)::

    b"\\x00C2" | meta | b"\\n" | body

* ``b"\\x00C2"``: magic and format version (2 = Celery protocol 2). A job
  body enqueued by non-Celery code (the Python client, any Thrift client)
  lacks it, and runs as its queue's task with the raw body as the argument.
* ``meta``: one line of compact JSON, ``{"h": headers, ...}``: the Celery
  protocol 2 headers with every default value left out (``lang: "py"``,
  ``retries: 0``, ``root_id`` equal to ``id``, ``None``/empty values...),
  and ``eta`` removed because it became the job's ``run_after``. A
  message that is not a Celery task (no ``task`` and ``id`` headers: plain
  Kombu) keeps its headers exactly as published, under ``k`` instead of
  ``h``, and comes back with nothing added. Optional
  keys: ``c`` correlation id when it differs from the task id, ``r``
  reply_to, ``t`` content type when not ``application/json``, ``e`` content
  encoding when not ``utf-8``, ``p`` any other message properties, ``x``
  when the message expires (epoch ms, from its ``expiration``). JSON
  escapes newlines, so the first ``\\n`` ends the meta.
* ``body``: the serialized ``[args, kwargs, embed]`` exactly as Celery made
  it, not base64'd (JSON bodies stay readable in ``pinlater lookup --body``).

Not stored, because the job already has them: the priority (the job's
priority), the delivery tag (the job's descriptor and claim, given back on
dequeue: ``delivery_tag``), the exchange and routing key (the job's
queue), the eta (run_after).
A no-op task with no arguments costs ~150 bytes against ~700 for the
stock Redis transport's JSON-and-base64 envelope.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pinlater.models import DequeuedJob

MAGIC = b"\x00C2"
JSON = "application/json"
UTF8 = "utf-8"
RAW_CONTENT_TYPE = "application/x-pinlater-raw"

# Celery protocol 2 header defaults (celery.app.amqp.AMQP.as_task_v2): left
# out when stored, put back when read.
_DEFAULTS: dict[str, Any] = {
    "lang": "py",
    "shadow": None,
    "eta": None,
    "expires": None,
    "group": None,
    "group_index": None,
    "retries": 0,
    "timelimit": [None, None],
    "parent_id": None,
    "argsrepr": None,
    "kwargsrepr": None,
    "origin": None,
    "ignore_result": False,
    "replaced_task_nesting": 0,
    "stamped_headers": None,
    "stamps": {},
}
# Properties that the job itself carries, or that mean nothing here.
_IMPLIED_PROPERTIES = {"delivery_info", "delivery_tag", "body_encoding", "priority", "delivery_mode",
                       "correlation_id", "reply_to"}


# Not frozen: one is made per delivery, and a frozen dataclass's __init__
# costs ~1 µs more for these nine fields.
@dataclass(slots=True)
class StoredMessage:
    headers: dict[str, Any]
    body: bytes
    content_type: str
    content_encoding: str
    correlation_id: str | None
    reply_to: str | None
    properties: dict[str, Any]
    # A Celery task message (protocol 2): its headers get the defaults back,
    # and the job's attempts and claim on delivery.
    celery: bool = True
    # Epoch ms after which it must not be delivered (Kombu's ``expiration``).
    expires_at_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms


_MUTABLE_DEFAULTS = tuple(k for k, v in _DEFAULTS.items() if isinstance(v, list | dict))


def _default_headers() -> dict[str, Any]:
    """A fresh copy of the defaults: the list and dict values copied too,
    since Celery may change a message's headers in place."""
    headers = dict(_DEFAULTS)
    for k in _MUTABLE_DEFAULTS:
        headers[k] = headers[k].copy()
    return headers


def eta_to_ms(eta: Any) -> int | None:
    """Celery's ISO 8601 eta header as epoch milliseconds (naive = UTC)."""
    if not eta:
        return None
    when = eta if isinstance(eta, datetime) else datetime.fromisoformat(str(eta))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


# One encoder for every meta line (json.dumps with options builds one per call).
_META_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
# The decoder's scanner, called straight: json.loads costs ~1.5 µs more per
# meta line (encoding detection, its wrappers, whitespace matches).
_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_MISSING = object()


def is_celery_task(headers: dict[str, Any]) -> bool:
    return "task" in headers and "id" in headers


def encode(message: dict[str, Any], body: bytes, *, expires_at_ms: int | None = None) -> bytes:
    headers = message.get("headers") or {}
    properties = message.get("properties") or {}
    task_id = headers.get("id")
    meta: dict[str, Any]
    if is_celery_task(headers):
        meta = {"h": {
            k: v for k, v in headers.items()
            if k != "eta" and v != _DEFAULTS.get(k, _MISSING) and not (k == "root_id" and v == task_id)
        }}
    else:
        meta = {"k": headers}
    correlation_id = properties.get("correlation_id")
    if correlation_id and correlation_id != task_id:
        meta["c"] = correlation_id
    if properties.get("reply_to"):
        meta["r"] = properties["reply_to"]
    content_type = message.get("content-type") or JSON
    if content_type != JSON:
        meta["t"] = content_type
    content_encoding = message.get("content-encoding") or UTF8
    if content_encoding != UTF8:
        meta["e"] = content_encoding
    extra = {k: v for k, v in properties.items() if k not in _IMPLIED_PROPERTIES}
    if extra:
        meta["p"] = extra
    if expires_at_ms is not None:
        meta["x"] = int(expires_at_ms)
    return MAGIC + _META_ENCODER.encode(meta).encode() + b"\n" + body


def _load_meta(text: str) -> Any:
    """``json.loads(text)``: the scanner alone reads a line as ``encode``
    writes it (one JSON value, no whitespace around it); anything else is
    left to ``json.loads``, which also raises what it raises."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except StopIteration:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def decode(raw: bytes) -> StoredMessage | None:
    """The stored message, or None when ``raw`` is not in this format (a raw
    body from a non-Celery client)."""
    if not raw.startswith(MAGIC):
        return None
    end = raw.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        meta = _load_meta(raw[len(MAGIC):end].decode("utf-8", "surrogatepass"))
    except ValueError:
        return None
    if not isinstance(meta, dict):
        return None
    expires = meta.get("x")
    expires_at_ms = expires if isinstance(expires, int) else None
    if isinstance(meta.get("k"), dict):
        return StoredMessage(
            headers=meta["k"],
            body=raw[end + 1:],
            content_type=meta.get("t", JSON),
            content_encoding=meta.get("e", UTF8),
            correlation_id=meta.get("c"),
            reply_to=meta.get("r"),
            properties=dict(meta.get("p") or {}),
            celery=False,
            expires_at_ms=expires_at_ms,
        )
    if not isinstance(meta.get("h"), dict):
        return None
    headers = _default_headers()
    headers.update(meta["h"])
    headers.setdefault("root_id", headers.get("id"))
    return StoredMessage(
        headers=headers,
        body=raw[end + 1:],
        content_type=meta.get("t", JSON),
        content_encoding=meta.get("e", UTF8),
        correlation_id=meta.get("c", headers.get("id")),
        reply_to=meta.get("r"),
        properties=dict(meta.get("p") or {}),
        expires_at_ms=expires_at_ms,
    )


def raw_message(body: bytes, task_name: str, task_id: str) -> StoredMessage:
    """A job body from a non-Celery client, as a message for ``task_name``
    whose only argument is the body (bytes). The body is decoded by the
    ``pinlater-raw`` serializer (workers.raw_serializer) in the pool process;
    argsrepr shows its size only, so events and logs never carry it."""
    headers = _default_headers()
    headers.update(task=task_name, id=task_id, root_id=task_id,
                   argsrepr=f"(<{len(body)} bytes>,)", kwargsrepr="{}")
    return StoredMessage(headers, body, RAW_CONTENT_TYPE, "binary", task_id, None, {})


def delivery_tag(job: DequeuedJob) -> str:
    """A claimed job's delivery tag: ``DESCRIPTOR/CLAIM``. A job that timed
    out and came back, to this worker too, is another delivery under
    another claim, so an ack or reject settles only the delivery it is
    for: a first run's late reject is stale, not the second run's end. A
    job without a claim (from a server that sends none) is tagged with its
    descriptor alone, and settled by the source's claim."""
    return f"{job.descriptor}/{job.claim}" if job.claim else job.descriptor


def tagged(tag: str) -> tuple[str, str | None]:
    """The descriptor and claim (None: none) of a delivery tag. Descriptors
    have no "/"; a claim may (its source is free text)."""
    descriptor, _, claim = tag.partition("/")
    return descriptor, claim or None


def kombu_payload(stored: StoredMessage, queue: str, job: DequeuedJob, source: str) -> dict[str, Any]:
    """The Kombu message of a claimed job. The delivery tag is the job's
    descriptor and claim (``delivery_tag``); ``headers["pinlater"]`` tells
    the task its job, claim and source (for heartbeats) and attempts;
    Celery's ``retries`` is PinLater's count
    of earlier attempts and ``run_after_ms`` since when it was runnable (None:
    not known). A job whose message has no trace context of its own (a raw
    body) gets the one stored with the job."""
    used = job.attempts_allowed - job.attempts_remaining
    headers = stored.headers
    if stored.celery:
        headers["retries"] = used
        headers["pinlater"] = {
            "descriptor": job.descriptor,
            "source": source,
            "claim": job.claim or None,
            "attempts_allowed": job.attempts_allowed,
            "attempts_remaining": job.attempts_remaining,
            "run_after_ms": job.run_after_ms,
        }
        if job.trace is not None and "traceparent" not in headers:
            headers["traceparent"] = job.trace
    priority = int(job.descriptor.rsplit(":", 2)[1][1:])
    return {
        "body": stored.body,
        "content-type": stored.content_type,
        "content-encoding": stored.content_encoding,
        "headers": headers,
        "properties": {
            **stored.properties,
            "correlation_id": stored.correlation_id,
            "reply_to": stored.reply_to,
            "delivery_mode": 2,
            "priority": priority,
            "body_encoding": None,
            "delivery_tag": delivery_tag(job),
            "delivery_info": {"exchange": "", "routing_key": queue, "redelivered": used > 0},
        },
    }
