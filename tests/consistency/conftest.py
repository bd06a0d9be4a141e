"""Fixtures of the consistency model: the session's app data and HBase
tables (the fixtures of tests/appdata and tests/hbase) and, for
"redis+thrift", the session's ``pinlater server``."""

from __future__ import annotations

from tests.appdata.conftest import appdata  # noqa: F401  (a fixture, used by name)
from tests.hbase.conftest import pair  # noqa: F401  (a fixture, used by name)
from tests.workers.conftest import thrift_server  # noqa: F401  (a fixture, used by name)
