"""Garbage in: random, mutated and truncated frames, impossible lengths and
out-of-range values. Each gets an error reply or a closed connection (that
connection only), never a crash or a hang; the server answers a
well-formed call right after. Bounded loops, 127.0.0.1 only."""

from __future__ import annotations

import math
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from pinlater.errors import EnqueueRejected, ErrorCode
from pinlater.service import JobService
from pinlater.thrift import idl
from pinlater.thrift.client import CallFailed, ServerUnavailable, ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.thrift.conftest import make_service
from tests.thrift.rawwire import call_frame, closed_by_server, connect, ctx, length_prefix, read_reply

QUEUE = "fuzzq"
MiB = 1024 * 1024


@pytest.fixture
def fuzz_server(memory_service: JobService, start_server: Callable[..., ThriftServer]) -> ThriftServer:
    memory_service.create_queue(QUEUE)
    # The production ratio of frame limit to body limit (16 bodies + slack)
    # would be 2 MiB with the tests' 64 KiB bodies: use 16 MiB so that a
    # 10 MB body reaches the service and is refused there, with its code.
    return start_server(memory_service, max_frame_bytes=16 * MiB, frame_timeout_s=1.0)


def assert_serving(server: ThriftServer) -> None:
    with ThriftClient([f"127.0.0.1:{server.port}"], source="checker", timeout_s=5, retries=0) as c:
        assert QUEUE in c.queue_names()


def sample_frames() -> list[bytes]:
    d = f"{QUEUE}:sm1:p1:1"
    job = idl.PinLaterJob(body=b'{"pin": 1}', priority=1)
    ack = idl.PinLaterJobAckRequest(queueName=QUEUE, jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor=d)])
    checkpoint = idl.PinLaterCheckpointJobRequest(jobDescriptor=d, newBody="x")
    requests: list[tuple[str, Any]] = [
        ("createQueue", None),
        ("enqueueJobs", idl.PinLaterEnqueueRequest(queueName=QUEUE, jobs=[job, job])),
        ("dequeueJobs", idl.PinLaterDequeueRequest(queueName=QUEUE, limit=2, jobAckRequest=ack)),
        ("ackDequeuedJobs", ack),
        ("checkpointJobs", idl.PinLaterCheckpointJobsRequest(queueName=QUEUE, requests=[checkpoint])),
        ("lookupJobs", idl.PinLaterLookupJobRequest(jobDescriptors=[d])),
        ("getJobCount", idl.PinLaterGetJobCountRequest(queueName=QUEUE, jobState=0)),
        ("getQueueNames", None),
        ("scanJobs", idl.PinLaterScanJobsRequest(queueName=QUEUE, jobState=0)),
        ("retryFailedJobs", idl.PinLaterRetryFailedJobsRequest(queueName=QUEUE)),
        ("deleteJobs", idl.PinLaterDeleteJobsRequest(queueName=QUEUE, jobState=3)),
    ]
    frames = []
    for method, request in requests:
        if method == "createQueue":
            frames.append(call_frame(method, context=ctx(), name=QUEUE))
        elif request is None:
            frames.append(call_frame(method, context=ctx()))
        else:
            frames.append(call_frame(method, context=ctx(), request=request))
    return frames


def send_and_expect_answer_or_close(server: ThriftServer, sock: Any, data: bytes) -> Any:
    """Sends ``data``; returns the open socket (or a new one if the server
    closed it). Fails if the server neither answers nor closes."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):  # closed after the previous frame
        sock.close()
        sock = connect(server.port)
        sock.sendall(data)
    reply = read_reply(sock)
    if reply is None:
        sock.close()
        return connect(server.port)
    return sock


def test_random_frames(fuzz_server: ThriftServer) -> None:
    rng = random.Random(20240601)
    names = [b"enqueueJobs", b"dequeueJobs", b"lookupJobs", b"scanJobs", b"getQueueNames", b"nope"]
    sock = connect(fuzz_server.port)
    for _ in range(150):
        body = rng.randbytes(rng.randint(1, 3000))
        if rng.random() < 0.6:  # a valid message header, then garbage: reaches the struct walk
            name = rng.choice(names)
            body = struct.pack("!iI", -2147418111, len(name)) + name + struct.pack("!i", 7) + body
        sock = send_and_expect_answer_or_close(fuzz_server, sock, length_prefix(len(body)) + body)
    sock.close()
    assert_serving(fuzz_server)
    assert fuzz_server.stats.bad_frames > 0


def test_mutated_frames(fuzz_server: ThriftServer) -> None:
    rng = random.Random(7)
    frames = sample_frames()
    sock = connect(fuzz_server.port)
    for _ in range(400):
        frame = bytearray(rng.choice(frames))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)  # the length prefix stays right
        sock = send_and_expect_answer_or_close(fuzz_server, sock, bytes(frame))
    sock.close()
    assert_serving(fuzz_server)


def test_truncated_frames(fuzz_server: ThriftServer) -> None:
    frame = sample_frames()[1]
    for cut in sorted(random.Random(3).sample(range(1, len(frame)), 25)):
        sock = connect(fuzz_server.port)
        sock.sendall(frame[:cut])
        sock.shutdown(1)  # SHUT_WR: the frame ends early
        assert closed_by_server(sock, timeout_s=3)
        sock.close()
    # Cut short and left open: closed after the frame timeout; others are
    # served meanwhile, at once.
    stalled = connect(fuzz_server.port)
    stalled.sendall(frame[: len(frame) // 2])
    started = time.monotonic()
    assert_serving(fuzz_server)
    assert time.monotonic() - started < 0.9
    assert closed_by_server(stalled, timeout_s=5)
    stalled.close()
    assert_serving(fuzz_server)


@pytest.mark.parametrize("prefix", [0, -1, -2147483648, 2**31 - 1, 16 * MiB * 4 + 1, 2_000_000_000])
def test_impossible_lengths_close_the_connection_without_allocating(fuzz_server: ThriftServer, prefix: int) -> None:
    sock = connect(fuzz_server.port)
    sock.sendall(length_prefix(prefix) + b"0123456789")
    assert closed_by_server(sock, timeout_s=3)
    sock.close()
    assert_serving(fuzz_server)


def test_unframed_client_is_closed(fuzz_server: ThriftServer) -> None:
    sock = connect(fuzz_server.port)
    sock.sendall(sample_frames()[7][4:])  # a strict binary message without the frame length
    assert closed_by_server(sock, timeout_s=3)
    sock.close()
    assert_serving(fuzz_server)


def test_unknown_method_keeps_the_connection(fuzz_server: ThriftServer) -> None:
    sock = connect(fuzz_server.port)
    name = b"launchRockets"
    body = struct.pack("!iI", -2147418111, len(name)) + name + struct.pack("!i", 9) + b"\x00"
    sock.sendall(length_prefix(len(body)) + body)
    kind, exc = read_reply(sock)
    assert kind == "exception" and "launchRockets" in exc.message
    sock.sendall(sample_frames()[7])
    assert QUEUE in read_reply(sock).success
    sock.close()


def _bad(method: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return method, args


def out_of_range_cases() -> list[tuple[str, dict[str, Any], ErrorCode]]:
    job, q = idl.PinLaterJob, QUEUE
    enq = idl.PinLaterEnqueueRequest
    deq = idl.PinLaterDequeueRequest
    cases: list[tuple[str, dict[str, Any], ErrorCode]] = [
        ("dequeueJobs", {"request": deq(queueName=q, limit=-1)}, ErrorCode.UNKNOWN),
        ("dequeueJobs", {"request": deq(queueName=q, limit=2**31 - 1)}, ErrorCode.UNKNOWN),
        ("dequeueJobs", {"request": deq(queueName=q, limit=1, coverage=0.0)}, ErrorCode.UNKNOWN),
        ("dequeueJobs", {"request": deq(queueName=q, limit=1, coverage=math.nan)}, ErrorCode.UNKNOWN),
        ("dequeueJobs", {"request": deq(queueName=q, limit=1, coverage=5.0)}, ErrorCode.UNKNOWN),
        ("dequeueJobs", {"request": None}, ErrorCode.UNKNOWN),
        ("scanJobs", {"request": idl.PinLaterScanJobsRequest(queueName=q, jobState=0, limit=-5)}, ErrorCode.UNKNOWN),
        ("scanJobs", {"request": idl.PinLaterScanJobsRequest(queueName=q, jobState=0, limit=10**9)}, ErrorCode.UNKNOWN),
        ("scanJobs", {"request": idl.PinLaterScanJobsRequest(queueName=q, jobState=0, continuation="-1")},
         ErrorCode.CONTINUATION_INVALID),
        ("retryFailedJobs", {"request": idl.PinLaterRetryFailedJobsRequest(queueName=q, limit=-1)}, ErrorCode.UNKNOWN),
        ("retryFailedJobs", {"request": idl.PinLaterRetryFailedJobsRequest(queueName=q, priority=0)},
         ErrorCode.PRIORITY_NOT_SUPPORTED),
        ("retryFailedJobs", {"request": idl.PinLaterRetryFailedJobsRequest(queueName=q, attemptsToAllow=-4)},
         ErrorCode.ENQUEUE_REJECTED),
        ("deleteJobs", {"request": idl.PinLaterDeleteJobsRequest(queueName=q, jobState=3, limit=2**31 - 1)},
         ErrorCode.UNKNOWN),
        ("getJobCount", {"request": idl.PinLaterGetJobCountRequest(queueName=q, jobState=9)}, ErrorCode.UNKNOWN),
        ("getJobCount", {"request": idl.PinLaterGetJobCountRequest(queueName=q, jobState=0, priority=-56)},
         ErrorCode.PRIORITY_NOT_SUPPORTED),
        ("getJobCount", {"request": idl.PinLaterGetJobCountRequest(queueName=q, jobState=0, bodyRegexToMatch="(")},
         ErrorCode.UNKNOWN),
        ("lookupJobs", {"request": idl.PinLaterLookupJobRequest(jobDescriptors=["x" * 5000] * 2000)},
         ErrorCode.UNKNOWN),
        ("createQueue", {"name": ""}, ErrorCode.QUEUE_NAME_INVALID),
        ("createQueue", {"name": None}, ErrorCode.QUEUE_NAME_INVALID),
    ]
    for wire_job, code in (
        (job(body=b"x", priority=0), ErrorCode.PRIORITY_NOT_SUPPORTED),
        (job(body=b"x", priority=-56), ErrorCode.PRIORITY_NOT_SUPPORTED),  # 200 as an unsigned byte
        (job(body=b"x", priority=127), ErrorCode.PRIORITY_NOT_SUPPORTED),
        (job(body=b"x", numAttemptsAllowed=-3), ErrorCode.ENQUEUE_REJECTED),
        (job(body=b"x", numAttemptsAllowed=10**9), ErrorCode.ENQUEUE_REJECTED),
        (job(body=b"x", runAfterTimestampMillis=-1), ErrorCode.ENQUEUE_REJECTED),
        (job(body=b""), ErrorCode.ENQUEUE_REJECTED),
        (job(body=b"x" * (10 * MiB)), ErrorCode.ENQUEUE_REJECTED),
    ):
        cases.append(("enqueueJobs", {"request": enq(queueName=q, jobs=[wire_job])}, code))
    cases.append(("enqueueJobs", {"request": enq(queueName=q, jobs=[job(body=None)])}, ErrorCode.UNKNOWN))
    cases.append(("enqueueJobs", {"request": enq(queueName="x" * 300, jobs=[job(body=b"x")])},
                  ErrorCode.QUEUE_NAME_TOO_LONG))
    return cases


def test_out_of_range_values_get_error_codes(fuzz_server: ThriftServer, memory_service: JobService) -> None:
    sock = connect(fuzz_server.port, timeout_s=10)
    for i, (method, args, code) in enumerate(out_of_range_cases()):
        args.setdefault("context", ctx())
        sock.sendall(call_frame(method, seqid=i, **args))
        reply = read_reply(sock, method, timeout_s=10)
        assert reply is not None and not isinstance(reply, tuple), (method, args)
        assert reply.e is not None, (method, args)
        assert reply.e.errorCode == code, (method, args, reply.e.message)
        assert reply.e.message
    # Missing context for a claiming call.
    sock.sendall(call_frame("dequeueJobs", request=idl.PinLaterDequeueRequest(queueName=QUEUE, limit=1)))
    assert "RequestContext" in read_reply(sock, "dequeueJobs").e.message
    sock.sendall(sample_frames()[7])
    assert QUEUE in read_reply(sock).success  # the same connection still works
    sock.close()
    assert memory_service.count(QUEUE, "pending") == 0


def test_frame_over_the_limit_is_answered_or_closed(start_server: Callable[..., ThriftServer]) -> None:
    svc = make_service("memory")
    svc.create_queue(QUEUE)
    try:
        server = start_server(svc, max_frame_bytes=100_000)
        with ThriftClient([f"127.0.0.1:{server.port}"], source="big", retries=0) as c:
            # Up to 4x the limit: read and dropped in chunks, answered.
            with pytest.raises(EnqueueRejected, match="over the server's limit"):
                c.enqueue(QUEUE, [idl_job(300_000)])
            assert QUEUE in c.queue_names()
            # Beyond: the connection is closed (reset), while the client is
            # still sending (never ran: ServerUnavailable) or waiting (CallFailed).
            with pytest.raises((CallFailed, ServerUnavailable)):
                c.enqueue(QUEUE, [idl_job(1_000_000)])
            assert QUEUE in c.queue_names()
        assert svc.count(QUEUE, "pending") == 0
    finally:
        svc.close()


def idl_job(size: int) -> Any:
    from pinlater import Job

    return Job(b"x" * size)
