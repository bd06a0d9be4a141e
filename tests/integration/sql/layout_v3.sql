-- Storage layout 3 of the MySQL shards, frozen: layout 2's tables
-- (layout_v2.sql) plus the deleted_queues table, as PinLater made them
-- before job tables had a trace column. The control store stayed at
-- layout 2. tests/integration/test_migrations.py builds an old store from
-- it. Do not change these blocks when the layout changes.

-- name: layout_v3_deleted_queues
CREATE TABLE deleted_queues (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- name: layout_v3_stamp
UPDATE pinlater_meta SET version = 3 WHERE name = 'shard'
