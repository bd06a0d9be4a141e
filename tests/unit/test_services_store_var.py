"""Where scripts/services keeps Redis's and MariaDB's files: one directory
per checkout, in RAM when /dev/shm is a tmpfs with room, and RAM
directories of checkouts that are gone removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import REPO

SERVICES = REPO / "scripts" / "services"
SHM = Path("/dev/shm")
PREFIX = f"pinlater-stores-{os.getuid()}."
MIN_FREE = 4 * 1024**3


def where(var: Path, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "PINLATER_STORE_VAR"}
    result = subprocess.run([str(SERVICES), "where"], env={**base, "PINLATER_VAR": str(var), **env},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def shm_has_room() -> bool:
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(SHM)], capture_output=True, text=True).stdout.strip()
    room = os.statvfs(SHM)
    return kind == "tmpfs" and os.access(SHM, os.W_OK) and room.f_bavail * room.f_frsize >= MIN_FREE


@pytest.fixture
def made() -> Iterator[list[Path]]:
    """RAM directories a test makes, removed after it."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def test_a_checkout_keeps_one_directory_and_a_setting_overrides_it(tmp_path: Path, made: list[Path]) -> None:
    var = tmp_path / "checkout" / ".var"
    first = where(var)
    made.append(Path(first))
    assert where(var) == first
    assert (var / "store-var").read_text().strip() == first
    if shm_has_room():
        chosen = Path(first)
        assert chosen.parent == SHM and chosen.name.startswith(PREFIX)
        assert (chosen / "owner").read_text().strip() == str(var)
        assert chosen.stat().st_mode & 0o777 == 0o700  # the stores' files are no one else's to read
    else:
        assert first == str(var)

    other = tmp_path / "other" / ".var"
    assert where(other, PINLATER_STORE_VAR=str(tmp_path / "mine")) == str(tmp_path / "mine")
    assert not (other / "store-var").exists()


def test_ram_directories_of_gone_checkouts_are_removed_unless_new_or_in_use(tmp_path: Path, made: list[Path]) -> None:
    def ram_dir(owner: Path, age_s: float, pid: int | None = None) -> Path:
        d = Path(subprocess.run(["mktemp", "-d", str(SHM / f"{PREFIX}XXXXXX")], capture_output=True, text=True,
                                check=True).stdout.strip())
        made.append(d)
        (d / "owner").write_text(f"{owner}\n")
        if pid is not None:
            (d / "redis-1").mkdir()
            (d / "redis-1" / "redis.pid").write_text(f"{pid}\n")
        then = time.time() - age_s
        os.utime(d, (then, then))
        return d

    live = tmp_path / "live" / ".var"
    live.mkdir(parents=True)
    gone = tmp_path / "gone" / ".var"
    stale = ram_dir(gone, 11 * 60)
    young = ram_dir(gone, 0)
    busy = ram_dir(gone, 11 * 60, pid=os.getpid())
    kept = ram_dir(live, 11 * 60)
    (live / "store-var").write_text(f"{kept}\n")
    recloned = ram_dir(live, 11 * 60)  # the same path, another clone's directory

    made.append(Path(where(tmp_path / "main" / ".var")))
    assert not stale.exists() and not recloned.exists()
    assert young.exists() and busy.exists() and kept.exists()
