"""How every command line here runs (``pinlater`` and the apps' own,
``pinlater-feeds``, ``pinlater-hbase``, ...): usage errors and failures as
one line on stderr, never a traceback unless -v; logging on stderr (INFO
for a command that runs until stopped); ``serve``'s ``--host``/``--port``
over the address of its ``*_HTTP`` setting, and serving an ``HttpServer``
until SIGTERM or SIGINT.

Each command line says how it tells its errors with an ``ErrorStyle``;
``describe`` is the one describer that reads it."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from pinlater.errors import PinLaterError
from pinlater.kit.cli_output import one_line
from pinlater.kit.envsettings import whole_number
from pinlater.kit.httpserver import HttpServer
from pinlater.kit.signals import on_signals
from pinlater.limits import MAX_DEQUEUE_RATE, MAX_RUNNING_CAP
from pinlater.queue_config import check_key_rate, check_max_running, check_rate

Hint = Callable[[BaseException, argparse.Namespace], "str | None"]


@dataclass(frozen=True)
class ErrorStyle:
    """How a command line tells a failure (see ``describe``)."""

    # Errors of the input, the settings or a store: their message, exit 2.
    refused: tuple[type[BaseException], ...] = (ValueError, OSError)
    # Errors said with what failed first ("feed unavailable: ..."), exit 2.
    labels: tuple[tuple[type[BaseException], str], ...] = ()
    # A job service error with its code: "{code}" and "{text}" (None: the text alone).
    pinlater_error: str | None = "error: {code}: {text}"
    # The whole message for errors that need saying otherwise (a missing package, ...), exit 2.
    hint: Hint | None = None
    # Anything else is an internal error: with this status, or said as refused (False).
    internal: bool = True
    internal_status: int = 1


def describe(exc: BaseException, args: argparse.Namespace, style: ErrorStyle) -> tuple[str, int, bool]:
    """``exc`` as one ``error...`` line, the exit status, and whether it is
    a failure a user cannot act on (shown as a traceback with -v)."""
    hinted = style.hint(exc, args) if style.hint is not None else None
    if hinted is not None:
        return f"error: {hinted}", 2, True
    if isinstance(exc, PinLaterError):
        text = one_line(exc.message) or type(exc).__name__
        form = "error: {text}" if style.pinlater_error is None else style.pinlater_error
        return form.format(code=exc.code.name, text=text), 2, False
    text = one_line(str(exc)) or type(exc).__name__
    for kind, label in style.labels:
        if isinstance(exc, kind):
            return f"error: {label}: {text}", 2, False
    if isinstance(exc, style.refused):
        return f"error: {text}", 2, False
    if not style.internal:
        return f"error: {text}", 2, True
    return f"error: {internal_error(exc)}", style.internal_status, True


def internal_error(exc: BaseException) -> str:
    return f"internal error: {type(exc).__name__}: {one_line(str(exc))} (run with -v for details)"


def runs_until_stopped(args: argparse.Namespace) -> bool:
    """A command that serves or tends until stopped (``long_running``, set
    by ``add_serve_command`` too), unless it runs ``--once``."""
    return bool(getattr(args, "long_running", False)) and not getattr(args, "once", False)


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    style: ErrorStyle,
    fn: Callable[[argparse.Namespace], int] | None = None,
) -> int:
    """Parse, log to stderr (INFO for a command that runs until stopped,
    DEBUG with -v), run ``fn(args)`` (default: the subcommand's
    ``args.fn``); an error is one line (``describe``) and its status."""
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.INFO if runs_until_stopped(args) else logging.ERROR
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int((fn or args.fn)(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, not a traceback
        line, status, unexpected = describe(exc, args, style)
        if unexpected and args.verbose:
            raise
        print(line, file=sys.stderr)
        return status


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, exit 2. Give it a ``-v/--verbose`` flag and
    subcommands setting ``fn`` (see ``run``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


def command_parser(
    prog: str, description: str, verbose: str = "log at debug level; tracebacks on errors"
) -> tuple[OneLineParser, argparse._SubParsersAction[OneLineParser]]:
    """An app command's parser, as ``run`` expects it: one-line usage errors,
    ``-v/--verbose`` (helped by ``verbose``) and required subcommands, which
    the caller adds to the returned action."""
    parser = OneLineParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose)
    return parser, parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)


def add_serve_command(
    sub: argparse._SubParsersAction[OneLineParser], text: str, fn: Callable[[argparse.Namespace], object],
    variable: str, name: str = "serve",
) -> OneLineParser:
    """The ``serve`` subcommand (or ``name``): ``fn`` serves until stopped,
    listening where ``--host`` and ``--port`` say, each overriding its half
    of ``variable``'s HOST:PORT."""
    parser = sub.add_parser(name, help=text)
    parser.set_defaults(fn=fn, long_running=True)
    parser.add_argument("--host", help=f"address to bind (default: the host of {variable})")
    parser.add_argument("--port", type=port_number, help=f"port (default: the port of {variable}; 0 picks a free one)")
    return parser


def listen_address(args: argparse.Namespace, host: str, port: int) -> tuple[str, int]:
    """Where ``serve`` listens: ``--host``/``--port`` where given, else the setting's ``host``/``port``."""
    return (host if args.host is None else args.host), (port if args.port is None else args.port)


_PORT = whole_number(0, 65535)


T = TypeVar("T")


def _unlimited_or(text: str, parse: Callable[[str], T], what: str) -> T | None:
    """An argparse type's value: 'unlimited' (or 'none') is None, anything
    else ``parse(text)``, whose ValueError becomes the one-line ``what``."""
    if text.strip().lower() in ("unlimited", "none"):
        return None
    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {what}, or 'unlimited'") from exc


def concurrency_cap(text: str) -> int | None:
    """An argparse type: a concurrency cap, a whole number of jobs from 1,
    or 'unlimited' (None)."""
    return _unlimited_or(text, lambda t: check_max_running(int(t)),
                         f"a concurrency cap: give a whole number of jobs from 1 to {MAX_RUNNING_CAP}")


def dequeue_rate(text: str) -> float | None:
    """An argparse type: jobs (or pages) per second, a finite number from 0
    (pauses), or 'unlimited' (None)."""
    return _unlimited_or(text, lambda t: check_rate(float(t)),
                         f"a rate: give jobs per second from 0 to {MAX_DEQUEUE_RATE:g}")


def key_rate(text: str) -> float | None:
    """An argparse type: jobs per second per fairness key, a finite number
    above 0, or 'unlimited' (None)."""
    return _unlimited_or(text, lambda t: check_key_rate(float(t)),
                         f"a per-key rate: give jobs per second above 0 and up to {MAX_DEQUEUE_RATE:g}")


def port_number(text: str) -> int:
    """An argparse type: a port, 0..65535 (0: the system picks one)."""
    try:
        return _PORT(text)
    except ValueError as exc:  # argparse would print only "invalid port_number value"
        raise argparse.ArgumentTypeError(str(exc)) from None


def serve_until_signal(prog: str, host: str, port: int, make_server: Callable[[str, int], HttpServer]) -> None:
    """Start ``make_server(host, port)``, print ``<prog> listening on
    host:port`` and serve until SIGTERM or SIGINT, then stop it."""
    stop = threading.Event()
    on_signals({signal.SIGTERM: stop.set, signal.SIGINT: stop.set})
    try:
        server = make_server(host, port).start()
    except OSError as exc:  # the port is taken, the host is not ours...
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        bound_host, bound_port = server.address
        print(f"{prog} listening on {bound_host}:{bound_port}", flush=True)
        # Wake now and then: a signal the kernel hands to another thread
        # runs its handler only when the main thread runs Python again.
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
