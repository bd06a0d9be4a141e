# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The ``pinlater-raw`` Kombu serializer: a job body enqueued by non-Celery
code (no Celery envelope) reaches its queue's task as the task's single
argument, as the exact bytes that were enqueued.

Only decoding is meaningful; the encoder exists because Kombu's registry
requires one. Every process that runs tasks must have imported this module
(``workers.app`` does), and the app accepts the content type.
"""

from __future__ import annotations

from typing import Any

from kombu.serialization import register

from workers.message_format import RAW_CONTENT_TYPE

NAME = "pinlater-raw"
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def _decode(data: bytes | str) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    body = data.encode() if isinstance(data, str) else bytes(data)
    return [body], {}, dict(_EMBED)


def _encode(value: Any) -> bytes:
    # A raw job is made by enqueueing bytes, never by serializing a task call.
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    raise TypeError("the pinlater-raw serializer only encodes bytes")


def register_raw_serializer() -> None:
    register(NAME, _encode, _decode, content_type=RAW_CONTENT_TYPE, content_encoding="binary")
