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
    "tests.support.thrift_compiler",
]


# First: pytest-xdist reads the groups in a hook of its own, and a group
# marked after it does not count.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), a file's tests stay in one
    process, so its module fixtures are made once. A test may name its group
    itself (``xdist_group``); the cases of a file marked ``spread_cases``
    (long, with no module fixture) each go wherever a process is free."""
    named = {item.nodeid for item in items if item.get_closest_marker("xdist_group")}
    long_files = {item.nodeid.split("::")[0] for item in items
                  if any(item.get_closest_marker(m) for m in ("slow", "spread_cases", "xdist_group"))}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            alone = item.get_closest_marker("spread_cases") is not None
            item.add_marker(pytest.mark.xdist_group(item.nodeid if alone else item.nodeid.split("::")[0]))
    # The longest first, so that no process starts one near the end while
    # the others sit idle: the tests that name a group of their own (the
    # consistency models), then files with long tests; a file's tests keep
    # their order. pytest-xdist keeps this order only without its own
    # reordering by group size (`--no-loadscope-reorder`, as `make test` runs).
    items.sort(key=lambda item: (item.nodeid not in named, item.nodeid.split("::")[0] not in long_files))
