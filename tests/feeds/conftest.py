"""Fixtures of the feed tests: the app-data store (4 shards on the test
MariaDB, per-session databases) and the HBase pair (both real clusters,
per-session tables), the very fixtures of tests/appdata and tests/hbase.
Helpers are in ``tests.feeds.helpers``."""

from tests.appdata.conftest import appdata  # noqa: F401  (a fixture, used by name)
from tests.hbase.conftest import pair  # noqa: F401  (a fixture, used by name)
