"""What of the MySQL kind other MySQL users of the project may build on (the
app-data layer's shard map and pools): the URL parser, so a shard map URL
reads exactly like a job shard's, and PyMySQL's TLS arguments. The pool's
checkout itself is kind-agnostic, in ``pinlater.kit.dbpool``."""

from __future__ import annotations

from pinlater.stores.mysql.url import MySQLUrl, mysql_connect_options

__all__ = ["MySQLUrl", "mysql_connect_options"]
