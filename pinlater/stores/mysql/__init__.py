"""The MySQL kind (``mysql://``, MariaDB or MySQL): shards as one table per
queue and priority (``shard`` and its ``claims``, ``reads``; statements in
``sql/``), the control store (``control``), the pool (``pool``), the layout
record and migration steps (``layout``) and the error mapping (``errors``)."""

from __future__ import annotations

from pinlater.stores import StoreKind, lazy

KIND = StoreKind(
    "mysql",
    ("mysql",),
    open_shard=lazy("pinlater.stores.mysql.shard:MySQLBackend.from_url"),
    open_control=lazy("pinlater.stores.mysql.control:MySQLControlStore.from_url"),
    migrate=lazy("pinlater.stores.mysql.layout:migrate"),
)
