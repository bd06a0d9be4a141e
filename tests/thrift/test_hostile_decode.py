"""Frames that cost the server far more than their bytes once decoded: a
list of millions of empty structs where a call takes at most 1,000 jobs,
containers in fields no struct has, one field repeated millions of times,
an unknown method with a huge body. Each is refused before thriftpy2
decodes anything, with the wire error the call would get, at a cost set by
the call's own limits and not by the frame's size; a normal client on
another connection keeps its latency while such frames of the maximum size
keep coming. (Roles, refused from the header alone: test_tls.py.)"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from pinlater import Ack, Checkpoint, Job
from pinlater.errors import PinLaterError
from pinlater.service import JobService
from pinlater.thrift import STRUCTS, idl
from pinlater.thrift.server import ThriftServer
from pinlater.thrift.walk import check_message
from tests.servers import REPO
from tests.support.server_process import ServerProcess, server_env
from tests.thrift.hostile_frames import (
    SHAPES,
    Hostile,
    context,
    decoded_reply,
    field,
    handled,
    header,
    list_head,
    refused_as_expected,
)
from tests.thrift.rawwire import call_frame, connect, ctx, length_prefix, read_reply
from tests.thrift.test_hostile import NormalClient, enough_file_descriptors

__all__ = ["enough_file_descriptors"]  # the autouse fixture, used here too

MiB = 1024 * 1024
# The default largest frame: 16 bodies of the default 1 MiB, and slack.
MAX_FRAME = 17 * MiB
QUEUE = "hostileq"
# What refusing one hostile frame may cost the server, whatever its size:
# the walk stops within the call's own limits (measured: ~6 KB and, for the
# slowest shape, ~20 ms on an idle core; before, 137 bytes and ~2 µs per
# byte of the frame: 2.4 GB and ~40 s for one 17 MiB frame).
PEAK_BYTES = 256 * 1024
CPU_S = 0.25


@pytest.fixture
def server(memory_service: JobService, start_server: Callable[..., ThriftServer]) -> ThriftServer:
    memory_service.create_queue(QUEUE)
    return start_server(memory_service, max_frame_bytes=MAX_FRAME)


def _handled(server: ThriftServer, frame: bytes) -> tuple[bytes, int, float]:
    """The server's reply to ``frame`` (the connection kept), with the peak
    of the memory and the CPU seconds its handling took."""
    reply, keep, peak, cpu = handled(server, frame)
    assert keep and reply is not None
    return reply, peak, cpu


def _reply(method: str, reply: bytes) -> Any:
    return decoded_reply(STRUCTS, method, reply)


def _assert_refused(shape: Hostile, reply: Any) -> None:
    if shape.code == "UNKNOWN_METHOD":
        assert isinstance(reply, TApplicationException), shape.name
        assert reply.type == TApplicationException.UNKNOWN_METHOD and shape.words in str(reply.message)
        return
    assert reply.e is not None, shape.name
    assert reply.e.errorCode == shape.code, (shape.name, reply.e.message)
    assert shape.words in reply.e.message, (shape.name, reply.e.message)


def test_the_hostile_frames_are_well_formed() -> None:
    """So that each is refused for what it holds, not for a malformation."""
    for shape in SHAPES:
        if shape.code != "UNKNOWN_METHOD":
            assert check_message(shape.frame(MiB)[4:]).name == shape.method, shape.name


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_a_hostile_frame_costs_what_its_call_may_cost_not_its_size(server: ThriftServer, shape: Hostile) -> None:
    """From 1 MiB to the maximum frame (17 MiB), refusing the frame takes
    the same small memory and time: the frame is walked only as far as
    the call's limits, and nothing of it is decoded."""
    for size in (MiB, MAX_FRAME - 4):
        frame = shape.frame(size)[4:]
        reply, peak, _ = _handled(server, frame)
        _assert_refused(shape, _reply(shape.method, reply))
        assert peak < PEAK_BYTES, f"{shape.name}: {peak} bytes for a frame of {size} bytes"
        started = time.thread_time()
        server.handle(frame)
        cpu = time.thread_time() - started
        assert cpu < CPU_S, f"{shape.name}: {cpu:.3f}s of CPU for a frame of {size} bytes"


def test_hostile_frames_get_the_wire_error_and_the_connection_stays(server: ThriftServer) -> None:
    sock = connect(server.port, timeout_s=10)
    try:
        for i, shape in enumerate(SHAPES):
            sock.sendall(shape.frame(2 * MiB))
            reply = read_reply(sock, shape.method, timeout_s=10)
            assert refused_as_expected(shape, reply), (shape.name, reply)
            sock.sendall(call_frame("getQueueNames", seqid=i, context=ctx()))
            assert QUEUE in read_reply(sock, "getQueueNames").success, shape.name
    finally:
        sock.close()
    assert server.stats.bad_frames == 0


def test_lists_over_the_calls_limits_get_the_same_error_as_in_process(
        server: ThriftServer, memory_service: JobService) -> None:
    """One item over a call's own limit: refused before decoding, with
    exactly the error the job service gives the same call in process."""
    cap = memory_service.settings.max_jobs_per_call
    descriptor = f"{QUEUE}:sm1:p1:1"
    calls: list[tuple[str, dict[str, Any], Callable[[], object]]] = [
        ("enqueueJobs", {"request": idl.PinLaterEnqueueRequest(
            queueName=QUEUE, jobs=[idl.PinLaterJob(body=b"j")] * (cap + 1))},
         lambda: memory_service.enqueue(QUEUE, [Job(b"j")] * (cap + 1))),
        ("ackDequeuedJobs", {"request": idl.PinLaterJobAckRequest(
            queueName=QUEUE, jobsSucceeded=[idl.PinLaterJobAckInfo(jobDescriptor=descriptor)] * (cap // 2 + 1),
            jobsFailed=[idl.PinLaterJobAckInfo(jobDescriptor=descriptor)] * (cap // 2 + 1))},
         lambda: memory_service.ack(QUEUE, succeeded=[Ack(descriptor)] * (cap // 2 + 1),
                                    failed=[Ack(descriptor)] * (cap // 2 + 1), source="s")),
        ("checkpointJobs", {"request": idl.PinLaterCheckpointJobsRequest(
            queueName=QUEUE, requests=[idl.PinLaterCheckpointJobRequest(jobDescriptor=descriptor)] * (cap + 1))},
         lambda: memory_service.checkpoint(QUEUE, [Checkpoint(descriptor)] * (cap + 1), source="s")),
        ("lookupJobs", {"request": idl.PinLaterLookupJobRequest(jobDescriptors=[descriptor] * 10_001)},
         lambda: memory_service.lookup([descriptor] * 10_001)),
    ]
    for method, args, in_process in calls:
        with pytest.raises(PinLaterError) as expected:
            in_process()
        frame = call_frame(method, context=ctx(), **args)[4:]
        reply, peak, _ = _handled(server, frame)
        error = _reply(method, reply).e
        assert (error.errorCode, error.message) == (int(expected.value.code), expected.value.message), method
        # Decoded, a thousand small items would be a few hundred KB.
        assert peak < 32 * 1024, f"{method}: decoded before it was refused ({peak} bytes)"


def test_the_worst_frame_within_the_bounds_is_decoded_at_a_bounded_cost(server: ThriftServer) -> None:
    """1,000 jobs (the limit), carrying as many unknown fields as the
    message's bound leaves room for: decoded (the job service then refuses
    the jobs, which have no body) within a small, fixed memory and time;
    one field more is refused before decoding."""
    unknown = field(2, 99) + b"\1"  # a bool field of an id no struct has
    budget = server.bounds["enqueueJobs"].bounds.elements
    # The arguments' context and request, the context's source, the jobs field, 1,000 items.
    fixed = 4 + 1000
    per_job, extra = divmod(budget - fixed, 1000)
    body = header("enqueueJobs") + context() + field(12, 2) + field(15, 2) + list_head(12, 1000)
    body += (unknown * per_job + b"\0") * 999 + unknown * (per_job + extra) + b"\0" + b"\0\0"
    reply, peak, cpu = _handled(server, body)
    error = _reply("enqueueJobs", reply).e
    assert error is not None and "struct fields" not in error.message, error.message
    assert peak < 4 * MiB and cpu < 1.0, (peak, cpu)
    over = body[:-3] + unknown + b"\0\0\0"
    over_reply, keep = server.handle(over)
    assert keep and over_reply is not None
    error = _reply("enqueueJobs", over_reply).e
    assert f"more than {budget} struct fields and container items" in error.message


# -- a normal client meanwhile, against a server process ---------------------------------------
@pytest.fixture
def server_process(servers: None) -> Iterator[ServerProcess]:
    with ServerProcess("--no-monitor", env=server_env()) as process:
        yield process


LOUDEST = ["enqueue: empty jobs", "enqueue: small lists of small lists in an extension field", "an unknown method"]


def test_a_normal_client_keeps_its_latency_while_hostile_frames_keep_coming(
        server_process: ServerProcess, queue_name: str) -> None:
    """Three connections of another process send hostile frames of the
    maximum size back to back (each waits for its answer): millions of
    empty jobs, small lists nested up to the message's bound, an unknown
    method. Before, one such frame held the server's GIL for tens of
    seconds; now the normal client's calls take under 100 ms more (90th
    percentile; all of them under 1 s) than without them."""
    with NormalClient(server_process.port, queue_name) as normal:
        time.sleep(2.0)
        baseline = list(normal.latencies)
        cpu_before = _cpu_seconds(server_process)
        attacker = subprocess.Popen(
            [sys.executable, "-m", "tests.thrift.hostile_frames", str(server_process.port), "6", str(MAX_FRAME - 4),
             *LOUDEST], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)  # the attack under way
            mark = len(normal.latencies)
            time.sleep(4.0)
            under_attack = normal.latencies[mark:]
            out, err = attacker.communicate(timeout=90)
            cpu = _cpu_seconds(server_process) - cpu_before
        finally:
            if attacker.poll() is None:
                attacker.kill()
                attacker.wait()
        normal.check(min_calls=20)
    assert attacker.returncode == 0, err
    answered = json.loads(out)
    assert min(answered.values()) >= 2, f"hostile frames answered: {answered}"
    per_byte = cpu / (sum(answered.values()) * MAX_FRAME)
    usual = statistics.median(baseline)
    added = sorted(latency - usual for latency in under_attack)
    p90 = added[int(0.9 * (len(added) - 1))]
    print(f"normal calls: median {usual * 1000:.1f} ms alone; under attack +{p90 * 1000:.1f} ms (p90), "
          f"+{added[-1] * 1000:.1f} ms at worst; hostile frames answered {answered}; "
          f"the server's CPU {cpu:.2f}s, {per_byte * 1e9:.2f} ns per hostile byte")
    assert p90 < 0.1, f"normal calls took {p90 * 1000:.0f} ms more (p90) while hostile frames came"
    # Receiving a frame costs a few ns a byte; decoding one of empty structs cost ~2 µs a byte.
    assert per_byte < 20e-9, f"the server spent {per_byte * 1e9:.0f} ns of CPU per hostile byte"


def _cpu_seconds(process: ServerProcess) -> float:
    """The CPU time (user and system) the server process has used."""
    with open(f"/proc/{process.p.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_frames_of_unknown_methods_are_not_walked(server: ThriftServer) -> None:
    """A method the server does not have is answered from the header: its
    body, however malformed, is neither walked nor decoded, and the
    connection stays."""
    sock = connect(server.port)
    try:
        body = header("launchRockets") + b"\xff" * 1000
        sock.sendall(length_prefix(len(body)) + body)
        kind, exc = read_reply(sock)
        assert kind == "exception" and exc.type == TApplicationException.UNKNOWN_METHOD
        sock.sendall(call_frame("getQueueNames", context=ctx()))
        assert QUEUE in read_reply(sock).success
    finally:
        sock.close()
    assert server.stats.bad_frames == 0


def test_large_frames_refused_from_their_header_are_never_buffered(
        server: ThriftServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large request for a method the server does not have is drained as
    it arrives, never held whole nor counted against the server's buffer
    budget: a stranger's frames cannot crowd out a real call's. (Roles:
    test_tls.py.)"""
    reserved: list[int] = []
    reserve = server.budget.reserve

    def counting(holder: Any, size: int, deadline: float) -> bool:
        reserved.append(size)
        return reserve(holder, size, deadline)

    monkeypatch.setattr(server.budget, "reserve", counting)
    sock = connect(server.port, timeout_s=20)
    try:
        body = header("launchRockets") + b"\xff" * (MAX_FRAME - 200)
        for seqid in range(3):
            sock.sendall(length_prefix(len(body)) + body)
            kind, exc = read_reply(sock, timeout_s=20)
            assert kind == "exception" and exc.type == TApplicationException.UNKNOWN_METHOD
            sock.sendall(call_frame("getQueueNames", seqid=seqid, context=ctx()))
            assert QUEUE in read_reply(sock).success
        # A large call of a method the server has is buffered as before.
        jobs = [Job(b"x" * (48 * 1024))] * 2  # over SMALL_FRAME in all
        frame = call_frame("enqueueJobs", context=ctx(), request=idl.PinLaterEnqueueRequest(
            queueName=QUEUE, jobs=[idl.PinLaterJob(body=j.body) for j in jobs]))
        sock.sendall(frame)
        assert len(read_reply(sock, "enqueueJobs").success.jobDescriptors) == 2
    finally:
        sock.close()
    assert reserved == [len(frame) - 4]
    assert server.budget.used == 0 and server.stats.bad_frames == 0
