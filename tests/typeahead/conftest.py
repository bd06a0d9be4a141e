"""Fixtures of the typeahead tests: the app-data store and the HBase pair of
tests/appdata and tests/hbase (real MariaDB and both real HBase clusters,
per-session databases and tables), and ``world`` (Celery workers on
PinLater, tests.feeds.world) for the task tests."""

from __future__ import annotations

from tests.appdata.conftest import appdata  # noqa: F401  (a fixture, used by name)
from tests.feeds.conftest import world  # noqa: F401  (a fixture, used by name)
from tests.hbase.conftest import pair  # noqa: F401  (a fixture, used by name)
from tests.workers.conftest import thrift_server  # noqa: F401  (a fixture, used by name)
