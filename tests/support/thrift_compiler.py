"""Fixture plugin: Apache Thrift's compiler, for the tests of stock clients
generated from this project's IDLs (the job service's and the Contacts
Service's)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def thrift_compiler() -> str:
    """Apache Thrift's compiler, installed with apt if missing."""
    path = shutil.which("thrift")
    if path is None:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "thrift-compiler"],
            check=True, capture_output=True, timeout=600,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
        )
        path = shutil.which("thrift")
    assert path is not None, "thrift-compiler did not install a thrift binary"
    return path
