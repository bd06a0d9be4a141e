"""The tiny app (tests/support/tinyapp) installed as a new app is: one
``pinlater.apps`` entry point, in a dist-info of its own put on
``PYTHONPATH`` (what one line of pyproject.toml installs), and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

from tests.servers import REPO

ENTRY_POINT = "tinyapp = tests.support.tinyapp.app:APP"


def install(site: Path) -> Path:
    """``site`` with the tiny app's dist-info in it."""
    info = site / "pinlater_tinyapp-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pinlater-tinyapp\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[pinlater.apps]\n{ENTRY_POINT}\n")
    return site


def env_with_app(site: Path, **more: str) -> dict[str, str]:
    """This process's environment with the tiny app installed, and the
    workers importing what the installed apps name."""
    env = {k: v for k, v in os.environ.items() if k != "PINLATER_CELERY_IMPORTS"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(REPO)]), **more)
    env.pop("PINLATER_SERVERS", None)
    return env
