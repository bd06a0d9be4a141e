"""The memory kind's test setup: one shard and a control store of its own
per test (a fresh URL), no servers."""

from __future__ import annotations

import uuid

from tests.support.stores import Setup

SETUPS = {
    "memory": Setup(lambda: "m1=memory://", lambda: f"memory://{uuid.uuid4().hex}", servers=False),
}
