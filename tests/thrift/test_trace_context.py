"""Trace context on the wire: the IDL's traced supersets of three published
structs. A job's own trace and its queue wait cross the wire both ways; a
server that does not trace still stores its caller's trace with the jobs;
a server that traces continues its caller's span; what a client sends that
is not a traceparent is ignored, never an error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import thriftpy2.rpc
from thriftpy2.transport import TFramedTransportFactory

from pinlater.models import Job
from pinlater.observe import tracing
from pinlater.thrift import idl, service
from pinlater.thrift.client import ThriftClient
from pinlater.thrift.server import ThriftServer
from tests.support.spans import spans_in_memory

TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@contextmanager
def _plain_thrift(server: ThriftServer) -> Iterator[Any]:
    """A thriftpy2 client of the IDL, with no tracing of its own: it sends
    exactly the structs it is given."""
    client = thriftpy2.rpc.make_client(service, "127.0.0.1", server.port, trans_factory=TFramedTransportFactory())
    try:
        yield client
    finally:
        client.close()


def test_a_jobs_trace_and_since_when_it_was_runnable_cross_the_wire(client: ThriftClient, queue_name: str) -> None:
    client.create_queue(queue_name)
    [traced, plain] = client.enqueue(queue_name, [Job(b"traced", trace=TRACE), Job(b"plain")])
    got = {j.descriptor: j for j in client.dequeue(queue_name, 10)}
    assert (got[traced].trace, got[plain].trace) == (TRACE, None)
    info = client.lookup([traced])[traced]
    assert got[traced].run_after_ms == info.run_after_ms


def test_a_server_that_does_not_trace_stores_its_callers_trace(
    server: ThriftServer, client: ThriftClient, queue_name: str
) -> None:
    client.create_queue(queue_name)
    bad = "00-not-a-trace"
    with _plain_thrift(server) as plain:
        for traceparent, body in ((TRACE, b"from a traced caller"), (bad, b"from a confused caller")):
            context = idl.PinLaterTracedRequestContext(source="traced-app", traceparent=traceparent)
            request = idl.PinLaterEnqueueRequest(queueName=queue_name, jobs=[idl.PinLaterJob(body=body)])
            plain.enqueueJobs(context, request)
    got = {j.body: j.trace for j in client.dequeue(queue_name, 10)}
    assert got == {b"from a traced caller": TRACE, b"from a confused caller": None}


def test_a_server_that_traces_continues_its_callers_span_and_stores_it(
    client: ThriftClient, queue_name: str
) -> None:
    client.create_queue(queue_name)
    with spans_in_memory() as exporter:
        with tracing.span("web request") as request_span:
            [descriptor] = client.enqueue(queue_name, [Job(b"from a web request")])
        [job] = client.dequeue(queue_name, 10)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    client_span, server_span = spans["client enqueueJobs"], spans["server enqueueJobs"]
    trace_id = request_span.get_span_context().trace_id
    assert client_span.parent is not None and client_span.parent.span_id == request_span.get_span_context().span_id
    assert server_span.parent is not None and server_span.parent.span_id == client_span.context.span_id
    assert server_span.context.trace_id == trace_id
    # The job's trace is a span of the server's enqueue, in the request's trace.
    assert job.descriptor == descriptor and job.trace is not None
    stored_trace_id, stored_span_id = job.trace.split("-")[1:3]
    assert int(stored_trace_id, 16) == trace_id
    assert int(stored_span_id, 16) in {s.context.span_id for s in exporter.get_finished_spans()
                                       if s.name != "web request" and s.context.trace_id == trace_id}
