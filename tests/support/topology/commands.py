"""Running ``ip``, ``tc`` and ``nft``: every call bounded by a timeout, every
failure one line naming the command; and the check, before anything is
built, that the machine has what the harness needs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

COMMAND_TIMEOUT_S = 20.0
# apt-get may first fetch its package lists: minutes on a slow mirror.
INSTALL_TIMEOUT_S = 300.0
INSTALL_LOCK = Path("/tmp/pltopo-apt.lock")


class TopologyError(RuntimeError):
    """A topology could not be built, changed or torn down; the message is
    one line saying what is missing or which command failed."""


def one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def run(argv: Sequence[str], *, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` to completion; raises ``TopologyError`` on a non-zero exit
    (when ``check``) or when it outlives ``timeout_s``."""
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise TopologyError(f"`{' '.join(argv)}` did not finish within {timeout_s:g}s") from None
    except FileNotFoundError:
        raise TopologyError(f"`{argv[0]}` is not installed") from None
    if check and done.returncode != 0:
        raise TopologyError(f"`{' '.join(argv)}` failed ({done.returncode}): {one_line(done.stderr or done.stdout)}")
    return done


def install_nftables() -> None:
    """``nft`` from apt, as the project's scripts install their packages.
    Serialised by a file lock: test processes started side by side would
    otherwise meet apt's own lock and fail."""
    if shutil.which("apt-get") is None:
        raise TopologyError("`nft` is missing and there is no apt-get to install nftables")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nftables"]
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shutil.which("nft") is not None:  # another process installed it while this one waited
            return
        try:
            done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                                  check=False)
            if done.returncode != 0:  # stale or empty package lists: fetch them once
                subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True,
                               timeout=INSTALL_TIMEOUT_S, check=False)
                done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                                      check=False)
        except subprocess.TimeoutExpired:
            raise TopologyError(f"installing nftables took over {INSTALL_TIMEOUT_S:g}s") from None
    if done.returncode != 0 or shutil.which("nft") is None:
        raise TopologyError(f"`nft` is missing and apt-get could not install nftables: {one_line(done.stderr)}")


def preflight() -> None:
    """Raises ``TopologyError`` naming the first thing missing: root, ``ip``,
    ``tc``, named network namespaces, ``nft`` (installed when absent)."""
    if os.geteuid() != 0:
        raise TopologyError("network topologies need root (namespaces, veths and nftables); run the tests as root")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            raise TopologyError(f"`{tool}` is missing: install {package}")
    if shutil.which("nft") is None:
        install_nftables()
