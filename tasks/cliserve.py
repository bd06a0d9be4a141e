"""What the task packages' command lines share (``pinlater-feeds``,
``pinlater-typeahead``): usage errors and failures as one line on stderr,
never a traceback unless -v, ``serve``'s ``--host``/``--port`` over the
address of its ``*_HTTP`` setting, and serving an ``HttpServer`` until
SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from pinlater.kit.cli_output import one_line
from pinlater.kit.envsettings import whole_number
from pinlater.kit.httpserver import HttpServer


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line, exit 2. Give it a ``-v/--verbose`` flag and
    subcommands setting ``fn`` (see ``run``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


def add_listen_options(parser: argparse.ArgumentParser, variable: str) -> None:
    """``--host`` and ``--port``, each overriding its half of ``variable``'s HOST:PORT."""
    parser.add_argument("--host", help=f"address to bind (default: the host of {variable})")
    parser.add_argument("--port", type=_port, help=f"port (default: the port of {variable}; 0 picks a free one)")


def listen_address(args: argparse.Namespace, host: str, port: int) -> tuple[str, int]:
    """Where ``serve`` listens: ``--host``/``--port`` where given, else the setting's ``host``/``port``."""
    return (host if args.host is None else args.host), (port if args.port is None else args.port)


_PORT = whole_number(0, 65535)


def _port(text: str) -> int:
    try:
        return _PORT(text)
    except ValueError as exc:  # argparse would print only "invalid _port value"
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    describe: Callable[[Exception], str],
    exit_status: Callable[[Exception], int],
) -> int:
    """Parse, log to stderr (INFO while serving), run ``args.fn(args)``; an
    error is printed as ``error: <describe(exc)>`` and exits ``exit_status(exc)``."""
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.INFO if args.command == "serve" else logging.ERROR
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.fn(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line, not a traceback
        if args.verbose:
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        return exit_status(exc)


def internal_error(exc: Exception) -> str:
    return f"internal error: {type(exc).__name__}: {one_line(str(exc))} (run with -v for details)"


def serve_until_signal(prog: str, host: str, port: int, make_server: Callable[[str, int], HttpServer]) -> None:
    """Start ``make_server(host, port)``, print ``<prog> listening on
    host:port`` and serve until SIGTERM or SIGINT, then stop it."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
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
