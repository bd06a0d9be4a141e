"""The operators' status dashboard: an HTTP page, its JSON API and
Prometheus ``/metrics``, reading the truth from the shards (so it also shows
jobs no worker has touched yet, which Flower cannot), with audited,
token-protected controls. Run it with ``pinlater dashboard``.

Modules: ``snapshot`` (what the page shows, read from the shards),
``controls`` (rate, pause, resume, retry-failed, delete-jobs), ``audit``
and ``progress`` (records kept in the control store, ``pinlater.records``),
``metrics`` (Prometheus text), ``rates`` (the per-minute rate charts),
``panels`` (the parts other packages add, found through entry points),
``api`` (JSON API), ``server`` (HTTP, and the ``Dashboard`` that ties it
together), ``cli``; the page is in ``static/``.
This package module imports none of them, so that ``pinlater --help``
stays light: import what you need from each.
"""
