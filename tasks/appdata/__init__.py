"""App data in sharded MySQL (as Pinterest shards it): users, boards, pins and follows.

- ``ids``: 64-bit ids (2 reserved bits, 16-bit shard, 10-bit type, 36-bit local id)
- ``shardmap``, ``settings``: ranges of shards to servers, one database per shard
- ``db``, ``store``: a connection pool per server; ``AppData`` ties them to the map
- ``tables``, ``schema``, ``sql``: the fixed tables and their SQL (``sql/appdata.sql``)
- ``objects``: object tables (JSON blob + created_at), batch get across shards
- ``mappings``: (from_id, to_id, sequence) tables, paged newest first by cursor
- ``graph``: users, boards, pins and follows with their shard rules and reverse rows
- ``generate``: a deterministic heavy-tailed graph generator (``python -m tasks.appdata.generate``)
"""
