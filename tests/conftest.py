"""The root of the test suite: it only names the shared fixtures, which live
in ``tests.support`` as plugins (each loaded once). The job service's own
fixtures come first; those of the apps import their packages lazily, so
``make test-core`` loads nothing of ``tasks`` or ``dashboards``."""

import pytest

pytest_plugins = [
    "tests.support.stores",
    "tests.support.workers",
    "tests.support.appdata",
    "tests.support.hbase",
    "tests.support.feeds",
    "tests.support.browser",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), a file's tests stay in one
    process, so its module fixtures are made once; a directory whose tests
    share one session fixture names its group itself (``xdist_group``)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
