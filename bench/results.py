"""Where every benchmark's ``--json`` goes: one way to write it."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path | None, result: object) -> None:
    """``result`` as indented JSON at ``path`` (its folder made), or
    nothing when no path was asked for."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
