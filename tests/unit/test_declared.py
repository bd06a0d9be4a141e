"""``declared``: an implementation takes its signature from the client
protocol, and Python itself binds each call against it."""

from __future__ import annotations

import inspect

import pytest

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.models import DequeuedJob
from pinlater.service import JobService
from pinlater.thrift.client import ThriftClient


class Recorder:
    seen: Call

    @declared(PinLaterClient.dequeue)
    def dequeue(self, a: Call) -> list[DequeuedJob]:
        self.seen = a
        return []


def test_the_body_gets_every_argument_by_name_with_the_declared_defaults() -> None:
    r = Recorder()
    assert r.dequeue("q", 5, dry_run=True) == []
    assert vars(r.seen) == {
        "queue": "q", "limit": 5, "source": None, "dry_run": True, "coverage": 1.0, "succeeded": (), "failed": (),
    }


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda r: r.dequeue("q"), "missing 1 required positional argument: 'limit'"),
        (lambda r: r.dequeue("q", 1, 2), "takes 3 positional arguments but 4 were given"),
        (lambda r: r.dequeue("q", 1, sorce="x"), "got an unexpected keyword argument 'sorce'"),
        (lambda r: r.dequeue("q", 1, queue="q"), "got multiple values for argument 'queue'"),
    ],
)
def test_a_bad_call_gets_pythons_own_error(call: object, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        call(Recorder())  # type: ignore[operator]


def test_the_signature_help_and_tracebacks_see_is_the_protocols() -> None:
    declared_sig = inspect.signature(PinLaterClient.dequeue)
    for cls in (Recorder, JobService, ThriftClient):
        method = cls.dequeue
        assert inspect.signature(method) == declared_sig, cls
        assert method.__name__ == "dequeue" and method.__qualname__.endswith(".dequeue"), cls


def test_a_declaration_with_star_args_is_refused() -> None:
    def varargs(self: object, *names: str) -> None: ...

    with pytest.raises(TypeError, match="plain named parameters only"):
        declared(varargs)(lambda self, a: None)
