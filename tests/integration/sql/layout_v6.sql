-- Storage layout 6 of the MySQL shards, frozen: layout 5's tables
-- (layout_v5.sql) with the table of unique keys, as PinLater made them
-- before job tables had a ukey column and a trigger taking keys.
-- tests/integration/test_migrations.py builds an old store from it.
-- Do not change these blocks when the layout changes.

-- name: layout_v6_unique
CREATE TABLE pinlater_unique (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  ukey VARBINARY(200) NOT NULL,
  priority INT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (queue, ukey),
  KEY by_job (queue, priority, id)
) ENGINE=InnoDB

-- name: layout_v6_stamp
UPDATE pinlater_meta SET version = 6 WHERE name = 'shard'
