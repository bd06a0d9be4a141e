"""Where every benchmark's ``--json`` goes: one way to write it."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path | str | None, result: object) -> None:
    """``result`` as indented JSON at ``path`` (its folder made), or
    nothing when no path was asked for."""
    if path is None or path == "":
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n")
