"""A tiny app, the smallest a new app can be: one queue with its task, one
HBase table and one dashboard panel, declared by one manifest (``app``).
Nothing else in the project names it: tests/apps install it with one
``pinlater.apps`` entry point (a dist-info of their own on ``PYTHONPATH``,
what one line of pyproject.toml would install) and find it in a worker,
in ``pinlater-hbase tables`` and on the dashboard."""
