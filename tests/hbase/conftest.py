"""Fixtures of the HBase tests. The clusters and the session's tables
(``pair``) come from ``tests.support.hbase``; here, a fresh row per test."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def row() -> bytes:
    return f"user-{uuid.uuid4().hex[:12]}".encode()
