"""The one CLI runner: each command line's errors as one line and a status,
told by its ``ErrorStyle``; a traceback with -v only for what a user cannot
act on."""

from __future__ import annotations

import argparse

import pytest

from pinlater.errors import QueueNotFound
from pinlater.kit.cli_runner import ErrorStyle, OneLineParser, describe, run


class Unavailable(Exception):
    pass


def _missing(exc: BaseException, args: argparse.Namespace) -> str | None:
    return f"`{args.command}` needs a package" if isinstance(exc, ModuleNotFoundError) else None


STYLE = ErrorStyle(labels=((Unavailable, "feed unavailable"),), hint=_missing)
ARGS = argparse.Namespace(command="serve", verbose=False)


@pytest.mark.parametrize(
    ("exc", "style", "told"),
    [
        (ValueError("bad\nvalue"), STYLE, ("error: bad value", 2, False)),
        (OSError("no route"), STYLE, ("error: no route", 2, False)),
        (Unavailable("hbase down"), STYLE, ("error: feed unavailable: hbase down", 2, False)),
        (QueueNotFound("no queue q"), STYLE, ("error: QUEUE_NOT_FOUND: no queue q", 2, False)),
        (ModuleNotFoundError("x"), STYLE, ("error: `serve` needs a package", 2, True)),
        (KeyError("k"), STYLE, ("error: internal error: KeyError: 'k' (run with -v for details)", 1, True)),
        (QueueNotFound("no queue q"), ErrorStyle(pinlater_error="error ({code}): {text}"),
         ("error (QUEUE_NOT_FOUND): no queue q", 2, False)),
        (QueueNotFound("no queue q"), ErrorStyle(pinlater_error=None), ("error: no queue q", 2, False)),
        (KeyError("k"), ErrorStyle(internal=False), ("error: 'k'", 2, True)),
        (KeyError("k"), ErrorStyle(internal_status=2),
         ("error: internal error: KeyError: 'k' (run with -v for details)", 2, True)),
        (OSError("no route"), ErrorStyle(refused=(ValueError,)),
         ("error: internal error: OSError: no route (run with -v for details)", 1, True)),
    ],
)
def test_an_error_is_told_as_its_style_says(exc: Exception, style: ErrorStyle, told: tuple[str, int, bool]) -> None:
    assert describe(exc, ARGS, style) == told


def _parser(fail: BaseException) -> OneLineParser:
    parser = OneLineParser(prog="prog")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    def fn(_args: argparse.Namespace) -> int:
        raise fail

    sub.add_parser("go").set_defaults(fn=fn)
    return parser


def test_the_runner_prints_one_line_and_raises_only_the_unexpected_with_v(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_parser(ValueError("bad")), ["go"], STYLE) == 2
    assert capsys.readouterr().err == "error: bad\n"
    assert run(_parser(ValueError("bad")), ["-v", "go"], STYLE) == 2
    with pytest.raises(KeyError):
        run(_parser(KeyError("k")), ["-v", "go"], STYLE)
    assert run(_parser(KeyboardInterrupt()), ["go"], STYLE) == 130
