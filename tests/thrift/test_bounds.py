"""The bounds a frame is walked within before it is decoded
(``pinlater.thrift.bounds``): every list of every method's arguments has
its call's limit, lists that share a limit count together, and whatever
the decoder would skip is bounded as well."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pinlater.errors import PinLaterError
from pinlater.settings import Settings
from pinlater.thrift import STRUCTS, idl
from pinlater.thrift.bounds import OTHER_ITEMS, call_bounds, call_lists
from pinlater.thrift.framing import FrameError
from pinlater.thrift.walk import OverLimit, check_body, read_header
from tests.thrift.hostile_frames import T_I32, T_LIST, T_STRING, T_STRUCT, context, field, header, list_head
from tests.thrift.rawwire import call_frame, ctx

CONTAINERS = (13, 14, 15)  # map, set, list


def _containers(cls: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The paths (field names) of every container field reachable from struct ``cls``."""
    found: set[tuple[str, ...]] = set()
    for spec in cls.thrift_spec.values():
        ttype, name = spec[0], spec[1]
        if ttype in CONTAINERS:
            found.add((*path, name))
        elif ttype == T_STRUCT:
            found |= _containers(spec[2], (*path, name))
    return found


def test_every_list_of_every_methods_arguments_has_its_calls_limit() -> None:
    """A list added to a request in the IDL must get a limit here, or the
    walk would cap it at the allowance of containers that are not."""
    lists = call_lists(Settings())
    for method, (args_cls, _) in STRUCTS.items():
        assert {path for path, _ in lists.get(method, [])} == _containers(args_cls), method
    assert set(lists) <= set(STRUCTS)


def _check(method: str, body: bytes, settings: Settings | None = None) -> None:
    _, pos = read_header(body)
    check_body(body, pos, call_bounds(settings or Settings())[method].bounds)


def _ack_frame(succeeded: int, failed: int) -> bytes:
    info = idl.PinLaterJobAckInfo(jobDescriptor="q:sr1:p1:1")
    request = idl.PinLaterJobAckRequest(queueName="q", jobsSucceeded=[info] * succeeded, jobsFailed=[info] * failed)
    return call_frame("ackDequeuedJobs", context=ctx(), request=request)[4:]


def test_an_acks_succeeded_and_failed_lists_share_one_limit() -> None:
    cap = Settings().max_jobs_per_call
    _check("ackDequeuedJobs", _ack_frame(cap // 2, cap // 2))
    with pytest.raises(OverLimit) as info:
        _check("ackDequeuedJobs", _ack_frame(cap // 2 + 1, cap // 2 + 1))
    assert (info.value.what, info.value.count, info.value.limit) == ("ACKs", cap + 2, cap)


def _enqueue_with_lists(*lists: tuple[int, int]) -> bytes:
    """An enqueue whose request holds field 2 once per (element type, n):
    n empty structs, or n zeros of another type."""
    body = header("enqueueJobs") + context() + field(T_STRUCT, 2)
    for etype, n in lists:
        items = b"\0" * n if etype == T_STRUCT else b"\0\0\0\0" * n
        body += field(T_LIST, 2) + list_head(etype, n) + items
    return body + b"\0\0"


def test_a_list_sent_twice_counts_twice() -> None:
    """The decoder reads a field each time it comes (the last one wins):
    both count."""
    _check("enqueueJobs", _enqueue_with_lists((T_STRUCT, 500), (T_STRUCT, 500)))
    with pytest.raises(OverLimit, match="1001 jobs in one call"):
        _check("enqueueJobs", _enqueue_with_lists((T_STRUCT, 500), (T_STRUCT, 501)))


def test_a_list_of_another_element_type_is_bounded_like_any_other_container() -> None:
    """The decoder skips a list whose elements are not of the declared
    type: it is not the call's jobs, and holds at most OTHER_ITEMS."""
    _check("enqueueJobs", _enqueue_with_lists((T_I32, OTHER_ITEMS)))
    with pytest.raises(OverLimit, match=f"a container of {OTHER_ITEMS + 1} items"):
        _check("enqueueJobs", _enqueue_with_lists((T_I32, OTHER_ITEMS + 1)))


def test_the_limits_follow_the_settings() -> None:
    settings = dataclasses.replace(Settings(), max_jobs_per_call=5)
    bounds = call_bounds(settings)["enqueueJobs"]
    _check("enqueueJobs", _enqueue_with_lists((T_STRUCT, 5)), settings)
    with pytest.raises(OverLimit) as info:
        _check("enqueueJobs", _enqueue_with_lists((T_STRUCT, 6)), settings)
    refusal = bounds.refusal(info.value)
    assert isinstance(refusal, PinLaterError)
    assert refusal.code.name == "ENQUEUE_REJECTED"
    assert refusal.message == "6 jobs in one call; the limit is 5 (PINLATER_MAX_JOBS_PER_CALL): split the batch"
    assert bounds.bounds.elements < call_bounds(Settings())["enqueueJobs"].bounds.elements


def test_a_cancels_descriptors_are_bounded_before_decoding() -> None:
    """cancelJobs, a stranger's cheapest large request: a descriptor named
    again counts again, and a list header claiming 2**31 - 1 descriptors in
    a few bytes is refused at the header, before any is read (it cannot
    fit the frame)."""
    cap = Settings().max_jobs_per_call
    frame = call_frame("cancelJobs", context=ctx(), request=idl.PinLaterCancelJobsRequest(
        queueName="q", jobDescriptors=["q:sr1:p1:1"] * cap))[4:]
    _check("cancelJobs", frame)
    again = call_frame("cancelJobs", context=ctx(), request=idl.PinLaterCancelJobsRequest(
        queueName="q", jobDescriptors=["q:sr1:p1:1"] * (cap + 1)))[4:]
    with pytest.raises(OverLimit) as info:
        _check("cancelJobs", again)
    assert (info.value.what, info.value.count, info.value.limit) == ("descriptors", cap + 1, cap)
    claimed = header("cancelJobs") + context() + field(T_STRUCT, 2) + field(T_LIST, 2) + list_head(T_STRING, 2**31 - 1)
    with pytest.raises(FrameError, match="container of 2147483647 items does not fit the frame"):
        _check("cancelJobs", claimed)
