"""``pinlater dev-certs DIR`` writes only into a directory of its own: a new
one, or an empty one of this user that no one else may write to; it never
follows a symbolic link, and never writes over a file already there."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pinlater.kit import devcerts
from pinlater.kit.devcerts import DevCertsError, write_dev_certs

EXPECTED = {"ca.pem", "roles", "server.env", "server.pem", "server.key"} | {
    f"{role}.{ext}" for role in devcerts.ROLE_NAMES for ext in ("pem", "key", "env")}


def test_a_new_directory_gets_every_file_keys_for_the_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "a" / "dev"
    written = write_dev_certs(target, days=1)
    assert {p.name for p in written} == EXPECTED == set(os.listdir(target))
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o600 if path.suffix == ".key" else 0o644), (path.name, oct(mode))
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert {p.name for p in write_dev_certs(empty, days=1)} == EXPECTED  # an empty one of ours is fine


def test_a_directory_with_anything_in_it_is_refused_and_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "dev"
    target.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("not a key\n")
    (target / "server.key").symlink_to(victim)  # planted: writing it would write the victim
    (target / "notes.txt").write_text("mine\n")
    with pytest.raises(DevCertsError, match="is not empty: give a new directory"):
        write_dev_certs(target, days=1)
    assert victim.read_text() == "not a key\n" and stat.S_IMODE(victim.stat().st_mode) != 0o600
    assert sorted(os.listdir(target)) == ["notes.txt", "server.key"]
    assert (target / "notes.txt").read_text() == "mine\n"


def test_a_symbolic_link_to_a_directory_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "dev"
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(DevCertsError, match="is a symbolic link"):
        write_dev_certs(link, days=1)
    assert os.listdir(elsewhere) == []


def test_a_directory_others_may_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(DevCertsError, match="may be written by others"):
        write_dev_certs(shared, days=1)
    assert os.listdir(shared) == []


def test_a_file_planted_while_it_writes_is_never_written_through(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The emptiness check and the writes are not one step: each file is
    created new (O_EXCL) and never through a link (O_NOFOLLOW)."""
    target = tmp_path / "dev"
    victim = tmp_path / "victim"
    victim.write_text("not a key\n")
    issue = devcerts.DevCA.issue

    def planting(self: devcerts.DevCA, common_name: str, **kwargs: Any) -> devcerts.Issued:
        if common_name == "pinlater-server":
            (target / "server.key").symlink_to(victim)
        return issue(self, common_name, **kwargs)

    monkeypatch.setattr(devcerts.DevCA, "issue", planting)
    with pytest.raises(DevCertsError, match=r"cannot create .*server\.key: File exists"):
        write_dev_certs(target, days=1)
    assert victim.read_text() == "not a key\n"


def test_the_command_refuses_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "dev"
    target.mkdir(mode=0o700)
    (target / "ca.pem").write_text("an older CA\n")
    done = subprocess.run([sys.executable, "-m", "pinlater.cli", "dev-certs", str(target)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip() == f"error: {target} is not empty: give a new directory, or an empty one of yours " \
                                  "(nothing there is replaced)"
    assert (target / "ca.pem").read_text() == "an older CA\n"
