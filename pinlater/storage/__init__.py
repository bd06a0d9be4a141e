"""The storage layer every store of the project shares: connection pools
(``redis_pool``, ``mysql_pool``), every Redis key name (``keys``), the Lua
and SQL loaders (``scripts``, ``sql``), one error guard per server kind
(``errors``) and the layout version each store records (``layout``,
``migrations``).

The script and statement texts stay beside their users (``backends/lua``,
``backends/sql``, ``control/lua``, ``dashboards/sql``); only the code that
loads them lives here.
"""
