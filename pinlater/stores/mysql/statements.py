"""The MySQL kind's statements, as named blocks of its ``sql/`` files
(``pinlater.kit.sqlblocks``): the shards' and the control store's
(``sql/mysql.sql``), the layout record and migration steps
(``sql/layout.sql``), and the control store's records, a log and a map
(``sql/records.sql``)."""

from __future__ import annotations

from pinlater.kit.sqlblocks import named_blocks

sql = named_blocks("pinlater.stores.mysql", "sql/mysql.sql")
LAYOUT_SQL = named_blocks("pinlater.stores.mysql", "sql/layout.sql")
RECORDS_SQL = named_blocks("pinlater.stores.mysql", "sql/records.sql")
