# mypy: disable-error-code="no-untyped-call"
# (Kombu ships without complete type hints.)
"""The stored job body format and the bus's channel names (no servers)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from kombu.transport.virtual.exchange import TopicExchange

from workers.bus import BusNames
from workers.message_format import MAGIC, decode, encode, eta_to_ms, raw_message
from workers.raw_serializer import _decode

HEADERS: dict[str, Any] = {
    "lang": "py", "task": "tests.add", "id": "abc", "shadow": None, "eta": "2030-01-01T00:00:00+00:00",
    "expires": None, "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
    "root_id": "abc", "parent_id": None, "argsrepr": "(1, 2)", "kwargsrepr": "{}", "origin": "gen1@h",
    "ignore_result": False, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
}


def _message(**props: object) -> dict[str, object]:
    return {
        "body": b"", "content-type": "application/json", "content-encoding": "utf-8",
        "headers": dict(HEADERS),
        "properties": {"correlation_id": "abc", "reply_to": "r-1", "delivery_mode": 2, "priority": 0,
                       "delivery_info": {"exchange": "", "routing_key": "q"}, **props},
    }


def test_round_trip_leaves_defaults_out_and_puts_them_back() -> None:
    body = b'[[1, 2], {}, {"callbacks": null}]'
    raw = encode(_message(), body)
    assert raw.startswith(MAGIC)
    meta = json.loads(raw[len(MAGIC):raw.index(b"\n")])
    assert set(meta["h"]) == {"task", "id", "argsrepr", "kwargsrepr", "origin"}
    assert meta["r"] == "r-1" and "c" not in meta
    stored = decode(raw)
    assert stored is not None
    expected = {k: v for k, v in HEADERS.items() if k != "eta"} | {"eta": None}
    assert stored.headers == expected
    assert stored.body == body
    assert (stored.correlation_id, stored.reply_to) == ("abc", "r-1")
    assert (stored.content_type, stored.content_encoding) == ("application/json", "utf-8")
    assert len(raw) < 200


def test_other_properties_and_content_types_survive() -> None:
    message = _message(correlation_id="other", expiration="60")
    message["content-type"] = "application/x-python-serialize"
    message["content-encoding"] = "binary"
    stored = decode(encode(message, b"\x80\x04\n\x00"))
    assert stored is not None
    assert stored.body == b"\x80\x04\n\x00"
    assert stored.correlation_id == "other"
    assert stored.properties == {"expiration": "60"}
    assert (stored.content_type, stored.content_encoding) == ("application/x-python-serialize", "binary")


def test_raw_bodies_are_not_mistaken_for_messages() -> None:
    for body in (b'{"user": 42}', b"", b"\x00C2 not json\n", b"\x00C2", bytes(range(256))):
        assert decode(body) is None
    msg = raw_message(b"\x00\x01", "tests.raw", "q:sr1:p1:7")
    assert msg.headers["task"] == "tests.raw" and msg.headers["id"] == "q:sr1:p1:7"
    assert msg.headers["argsrepr"] == "(<2 bytes>,)"
    assert _decode(msg.body) == ([b"\x00\x01"], {}, {"callbacks": None, "errbacks": None, "chain": None,
                                                     "chord": None})


def test_a_meta_line_reads_as_json_loads_reads_it() -> None:
    # Encoded lines take the scanner alone; anything else reads as json.loads
    # would (whitespace around the value), or not at all (trailing data).
    raw = encode(_message(), b"[]")
    meta = raw[len(MAGIC):raw.index(b"\n")]
    spaced = decode(MAGIC + b" " + meta + b" \n[]")
    assert spaced is not None and spaced == decode(raw)
    for line in (meta + b"{}", meta + b" x", b"[1, 2]", b'"h"', b"\xff{}", b"{\"h\": {\"task\": NaN}"):
        assert decode(MAGIC + line + b"\n[]") is None


def test_eta_is_epoch_milliseconds() -> None:
    assert eta_to_ms("2030-01-01T00:00:00+00:00") == int(datetime(2030, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert eta_to_ms("2030-01-01T00:00:00") == eta_to_ms("2030-01-01T00:00:00+00:00")
    assert eta_to_ms(None) is None


def test_topic_bindings_become_glob_patterns_that_cover_the_amqp_match() -> None:
    names = BusNames("p:")
    assert names.exchange("celeryev", "fanout", "x") == "p:f:celeryev"
    assert names.exchange("reply.celery.pidbox", "direct", "oid") == "p:d:reply.celery.pidbox|oid"
    pattern = names.topic_pattern("celeryev", "task.#")
    assert pattern == "p:t:celeryev|task.*"
    glob = re.compile("^" + re.escape(pattern).replace(r"\*", ".*") + "$")
    amqp = re.compile(TopicExchange(None).key_to_pattern("task.#"))
    for key in ("task.succeeded", "task.a.b", "worker.heartbeat"):
        if amqp.match(key):
            assert glob.match(names.exchange("celeryev", "topic", key))
    assert names.topic_pattern("e*x", "a") == "p:t:e\\*x|a"
