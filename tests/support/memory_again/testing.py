"""The ``memory2`` kind's test setups: a shard and a fresh control store
per test, and two shards; no servers."""

from __future__ import annotations

import uuid

from tests.support.stores import Setup

SETUPS = {
    "memory2": Setup(lambda: "m1=memory2://", lambda: f"memory2://{uuid.uuid4().hex}", servers=False),
    "memory2_sharded": Setup(
        lambda: "m1=memory2://,m2=memory2://", lambda: f"memory2://{uuid.uuid4().hex}", servers=False
    ),
}
