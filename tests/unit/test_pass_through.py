"""The service's faces implement what they offer: no method of ``JobService``
(its mixins included) or ``Operators`` only hands its arguments on to
another object's method, which would write the same signature twice."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from pinlater.operators import Operators
from pinlater.service import JobService


def _params(fn: ast.FunctionDef) -> list[str]:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [n for n in names if n not in ("self", "cls")]


def _rooted_at_self(node: ast.expr) -> bool:
    """``self.a.m`` or deeper: a method of another object the instance holds
    (``self.m`` is the instance's own method, not a hand-on)."""
    if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Attribute):
        return False
    inner: ast.expr = node.value
    while isinstance(inner, ast.Attribute):
        inner = inner.value
    return isinstance(inner, ast.Name) and inner.id == "self"


def _passed(call: ast.Call) -> list[str] | None:
    """The names a call passes, or None when it passes anything but a plain name."""
    names: list[str] = []
    for arg in call.args:
        value = arg.value if isinstance(arg, ast.Starred) else arg
        if not isinstance(value, ast.Name):
            return None
        names.append(value.id)
    for kw in call.keywords:
        if not isinstance(kw.value, ast.Name) or kw.arg not in (None, kw.value.id):
            return None
        names.append(kw.value.id)
    return names


def is_pass_through(fn: ast.FunctionDef) -> bool:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call) or not _rooted_at_self(call.func):
        return False
    passed = _passed(call)
    return passed is not None and sorted(passed) == sorted(_params(fn))


def pass_throughs(source: str) -> list[str]:
    tree = ast.parse(textwrap.dedent(source))
    return [
        f"{cls.name}.{fn.name}"
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef) and is_pass_through(fn)
    ]


@pytest.mark.parametrize("face", [JobService, Operators])
def test_a_face_implements_what_it_offers(face: type) -> None:
    classes = [c for c in face.__mro__ if c.__module__.startswith("pinlater.")]
    assert face in classes
    found = [name for c in classes for name in pass_throughs(inspect.getsource(c))]
    assert found == []


def test_the_check_sees_a_pass_through() -> None:
    source = '''
    class Face:
        def count(self, queue, state, *, priority=None):
            """Counts."""
            return self._reads.count(queue, state, priority=priority)

        def flush(self):
            self.core.counters.flush()

        def names(self, *names):
            return self.core.admin.queue_names(*names)

        def own(self, queue):
            return self.count(queue, "pending")

        def adapted(self, queue):
            return self.core.count(queue, 1)

        def wrapped(self, queue):
            return set(self.core.names(queue))

        def worked(self, queue):
            config = self.configs.get(queue)
            return self.core.count(queue, config)
    '''
    assert pass_throughs(source) == ["Face.count", "Face.flush", "Face.names"]
