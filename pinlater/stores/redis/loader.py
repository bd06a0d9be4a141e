"""The one Lua loader: ``<package>/lua/<name>.lua``, read once per process
and registered once per client with ``register_script``. ``call`` runs one
as EVALSHA straight on a pooled connection and loads it again if the server
lost its script cache (restart, SCRIPT FLUSH).

Every script file starts with ``-- <name>`` and a header naming its KEYS and
ARGV (checked here, so a script without one never loads). A prelude (helpers
shared by a family of scripts) can be prepended: only the definitions the
script uses, directly or through each other, since Redis runs a script's
top level on every call and each ``local function`` there is a new closure
each time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from redis.commands.core import Script


@cache
def lua_source(package: str, name: str) -> str:
    """The text of ``<package>/lua/<name>.lua`` (read once per process)."""
    return resources.files(package).joinpath("lua", f"{name}.lua").read_text("utf-8")


# A top-level definition: ``local function f``, ``local a, b = ...`` or
# ``local a, b`` (indented lines are inside a function or block).
_DEFINES = re.compile(r"^local\s+(?:function\s+)?([A-Za-z_][\w, ]*?)\s*(?:=|\(|$)", re.MULTILINE)
_WORD = re.compile(r"[A-Za-z_]\w*")


def used_prelude(prelude: str, script: str) -> str:
    """The blocks (separated by blank lines) of ``prelude`` that define a
    name ``script`` uses, directly or through later blocks, in their order.
    A Lua local is defined before its uses, so one backward pass finds them."""
    needed = set(_WORD.findall(script))
    kept: list[str] = []
    for block in reversed(prelude.split("\n\n")):
        names = {name.strip() for match in _DEFINES.finditer(block) for name in match.group(1).split(",")}
        if names & needed:
            kept.append(block)
            needed |= set(_WORD.findall(block))
    return "\n\n".join(reversed(kept))


def checked_source(package: str, name: str, prelude: str | None = None) -> str:
    """The script's text, after the prelude if one is named; ValueError if
    the file lacks its ``-- name`` line or its KEYS/ARGV header."""
    text = lua_source(package, name)
    header = text.split("\nlocal ", 1)[0]
    if not text.startswith(f"-- {name}") or "KEYS[" not in header or "ARGV[" not in header:
        raise ValueError(f"{package}/lua/{name}.lua lacks its '-- {name}' line or KEYS/ARGV header")
    return text if prelude is None else used_prelude(lua_source(package, prelude), text) + "\n" + text


def register(
    client: redis.Redis[bytes], package: str, names: tuple[str, ...], prelude: str | None = None
) -> dict[str, Script]:
    """name -> registered script, for every name."""
    return {name: client.register_script(checked_source(package, name, prelude)) for name in names}


def call(client: redis.Redis[bytes], script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """Run a registered ``script`` on a connection of ``client``'s pool and
    return its reply as ``script(keys=..., args=..., client=client)`` would.

    Every job transition is one script call, so this skips what
    ``Redis.execute_command`` adds to each (retry wrapper, metrics
    recording): 21-24 µs, about a fifth of a one-job enqueue's client
CPU (alternating scratch runs). As before:
    no retry of a script that may have run (a NOSCRIPT reply means it did
    not, so it is loaded and run once more); redis-py's own exceptions,
    including a full pool's from ``get_connection``; a connection that
    failed is disconnected, so the pool reconnects it before its next use.

    Checked against redis-py 8.1: ``tests/unit/test_third_party_guards.py``
    fails if this stops answering as ``Script.__call__`` does.
    """
    # types-redis' Script lacks the attributes redis-py sets.
    sha, source = script.sha, script.script  # type: ignore[attr-defined]
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        try:
            conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
            return conn.read_response()
        except redis.exceptions.NoScriptError:
            conn.send_command("SCRIPT", "LOAD", source)
            conn.read_response()
            conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
            return conn.read_response()
    except redis.exceptions.ResponseError:
        raise  # an error reply, read whole: the connection is fine
    except BaseException:
        # Lost, timed out, or interrupted with a reply maybe half read: the
        # connection must not serve another command as it is.
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
