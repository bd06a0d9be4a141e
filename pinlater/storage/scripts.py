"""The one Lua loader: ``<package>/lua/<name>.lua``, read once per process
and registered once per client with ``register_script``, so calls go out as
EVALSHA and redis-py re-sends the source by itself if the server lost its
script cache (restart, SCRIPT FLUSH).

Every script file starts with ``-- <name>`` and a header naming its KEYS and
ARGV (checked here, so a script without one never loads). A prelude (helpers
shared by a family of scripts) can be prepended: only the definitions the
script uses, directly or through each other, since Redis runs a script's
top level on every call and each ``local function`` there is a new closure
each time.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
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
