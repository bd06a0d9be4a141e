"""Flower with authentication: ``python -m workers.flower [Flower's options]``.

Flower's API publishes tasks (``/api/task/send-task/NAME``, ``apply``,
``async-apply``) with the arguments and queue its caller chooses, and with no
authentication configured Flower also skips its own cross-site checks: any web
page an operator opened could publish through it. So this is how Flower is
started (the Procfile's ``flower``): always with HTTP basic auth.

* ``PINLATER_FLOWER_AUTH_FILE``: a file of ``user:password`` lines (``#``
  starts a comment). Else Flower's own ``FLOWER_BASIC_AUTH``
  (``user:password,user2:password2``). The credentials reach Flower through
  its environment, never its command line, which ``ps`` shows to every user
  of the machine; ``--basic-auth`` is refused for that reason.
* Neither set: Flower does not start, and one line says what to set. With
  ``--dev-credentials PATH`` (the Procfile's, for a development machine), PATH
  is used instead: made when missing, with user ``admin`` and a random
  password, readable by its owner only, and the line printed says where.

With basic auth on, Flower refuses a cross-site request (its
``Sec-Fetch-Site`` or ``Origin`` header) before it reads the credentials.
``FLOWER_UNAUTHENTICATED_API`` is dropped: with auth it would change nothing.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from pinlater.kit.envsettings import plain_text, read

AUTH_FILE = "PINLATER_FLOWER_AUTH_FILE"
FLOWER_BASIC_AUTH = "FLOWER_BASIC_AUTH"
DEV_OPTION = "--dev-credentials"
DEV_USER = "admin"


class FlowerAuthError(Exception):
    """Flower cannot start authenticated; the message is one line."""


def parse_credentials(text: str, where: str, unit: str = "line") -> list[str]:
    """``user:password`` lines (or comma-separated pairs) as Flower takes
    them. A problem names its place, never the text (it may be a password)."""
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise FlowerAuthError(f"{where}, {unit} {number}: expected user:password")
        if any(c.isspace() or c == "," for c in line):
            # Flower splits FLOWER_BASIC_AUTH on commas.
            raise FlowerAuthError(f"{where}, {unit} {number}: no spaces or commas in a user or password")
        found.append(line)
    if not found:
        raise FlowerAuthError(f"{where} holds no user:password line")
    return found


def _read_file(path: Path, where: str) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise FlowerAuthError(f"{where}: cannot read {path}: {reason}") from None
    return parse_credentials(text, where)


def make_dev_credentials(path: Path) -> bool:
    """Writes ``admin:RANDOM`` to ``path`` unless it exists; True if it did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(f"# Flower's basic auth (python -m workers.flower)\n{DEV_USER}:{secrets.token_urlsafe(18)}\n")
    return True


def credentials(env: Mapping[str, str], dev_file: str | None) -> tuple[list[str], str]:
    """The basic-auth credentials and where they came from (for the log)."""
    path = read(env, AUTH_FILE, plain_text, "")
    if path:
        return _read_file(Path(path), AUTH_FILE), path
    pairs = env.get(FLOWER_BASIC_AUTH, "")
    if pairs.strip():
        return parse_credentials(pairs.replace(",", "\n"), FLOWER_BASIC_AUTH, "pair"), FLOWER_BASIC_AUTH
    if dev_file:
        made = make_dev_credentials(Path(dev_file))
        where = f"{dev_file} (made now: user {DEV_USER})" if made else dev_file
        return _read_file(Path(dev_file), DEV_OPTION), where
    raise FlowerAuthError(
        f"Flower's API publishes tasks, so it starts only with basic auth: set {AUTH_FILE} to a file of "
        f"user:password lines (or {DEV_OPTION}=PATH on a development machine)"
    )


def split_args(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--dev-credentials``'s path (None without it), and Flower's options."""
    dev_file: str | None = None
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == DEV_OPTION:
            dev_file = next(args, "")
        elif arg.startswith(DEV_OPTION + "="):
            dev_file = arg.partition("=")[2]
        elif arg.startswith(("--basic-auth", "--basic_auth")):
            raise FlowerAuthError(f"--basic-auth would show the password in ps: use {AUTH_FILE}")
        else:
            rest.append(arg)
    if dev_file == "":
        raise FlowerAuthError(f"{DEV_OPTION} needs a path")
    return dev_file, rest


def main(argv: list[str] | None = None) -> int:
    try:
        dev_file, flower_args = split_args(list(sys.argv[1:] if argv is None else argv))
        found, where = credentials(os.environ, dev_file)
    except FlowerAuthError as exc:
        print(f"flower: {exc}", file=sys.stderr)
        return 2
    print(f"flower: basic auth from {where}", file=sys.stderr)
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_UNAUTHENTICATED_API"}
    env[FLOWER_BASIC_AUTH] = ",".join(found)
    command = [sys.executable, "-m", "celery", "-A", "workers.app", "flower", *flower_args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, command, env)
    return 0  # not reached: execve replaces this process


if __name__ == "__main__":
    sys.exit(main())
