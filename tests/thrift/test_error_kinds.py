"""Errors that share a wire code are told apart on the wire too
(``PinLaterKindedException.kind``): above all an enqueue whose jobs may be
stored, ``EnqueueOutcomeUnknown``, which a remote caller took for a plain
``ShardConnectionFailed`` and sent again, or counted as not stored. The
same whether the silence was a shard's (behind the server) or the
server's own (a reply that never came)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pinlater import Job
from pinlater.errors import (
    EnqueueOutcomeUnknown,
    ErrorCode,
    InvalidRequest,
    PinLaterError,
    RegexBudgetExceeded,
    ShardConnectionFailed,
    error_for_code,
    wire_kind,
)
from pinlater.service import JobService
from pinlater.stores.base import ShardOutcomeUnknown
from pinlater.thrift import convert
from pinlater.thrift.client import CallFailed, ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.thrift.test_failover import AcceptAndDrop


@pytest.mark.parametrize("error", [
    EnqueueOutcomeUnknown("maybe stored"), InvalidRequest("bad"), RegexBudgetExceeded("too many bodies"),
    ShardConnectionFailed("down"), PinLaterError("odd"),
])
def test_an_error_comes_back_as_the_class_it_left_as(error: PinLaterError) -> None:
    back = convert.from_wire_error(convert.to_wire_error(error))
    assert type(back) is type(error) and back.message == error.message


def test_a_kind_that_does_not_fit_its_code_is_ignored() -> None:
    # A peer's kind is a hint, never a way to turn an error into another code's.
    assert type(error_for_code(int(ErrorCode.QUEUE_NOT_FOUND), "x", "EnqueueOutcomeUnknown")).__name__ == (
        "QueueNotFound")
    assert type(error_for_code(int(ErrorCode.SHARD_CONNECTION_FAILED), "x", "NoSuchKind")) is ShardConnectionFailed
    assert wire_kind(ShardOutcomeUnknown("x")) is None  # its code says all a remote caller can act on


def test_a_shard_gone_silent_after_an_enqueue_is_an_outcome_unknown_remotely(
    service: JobService, start_server: Callable[..., ThriftServer], queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = start_server(service)
    service.create_queue(queue_name)

    def silent(*_: object, **__: object) -> list[int]:
        raise ShardOutcomeUnknown("redis shard r1 unavailable after a command was sent (it may have run)")

    for backend in service.core.shards.healthy_shuffled():
        monkeypatch.setattr(backend, "enqueue", silent)
    with ThriftClient([f"127.0.0.1:{server.port}"], source="kinds") as client:
        with pytest.raises(EnqueueOutcomeUnknown, match="may or may not be stored"):
            client.enqueue(queue_name, [Job(b"maybe")])
        with pytest.raises(InvalidRequest):
            client.count(queue_name, "pending", body_regex="(")


def test_an_enqueue_whose_reply_never_came_is_an_outcome_unknown(
    service: JobService, start_server: Callable[..., ThriftServer], queue_name: str,
) -> None:
    good = start_server(service)
    service.create_queue(queue_name)
    dropper = AcceptAndDrop()
    try:
        servers = [f"127.0.0.1:{dropper.port}", f"127.0.0.1:{good.port}"]
        for key in ("", "k-1"):
            with ThriftClient(servers, source="kinds", retries=0) as client, pytest.raises(
                    EnqueueOutcomeUnknown, match="may or may not be stored") as info:
                client.enqueue(queue_name, [Job(b"maybe")], idempotency_key=key or None)
            assert isinstance(info.value, CallFailed)
            assert ("same idempotency_key" in info.value.message) == bool(key)
    finally:
        dropper.close()
