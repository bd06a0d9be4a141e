-- Storage layout 2 of the MySQL stores, frozen: layout 1's tables
-- (layout_v1.sql) plus the version record, as PinLater made them before
-- shards had a deleted_queues table. tests/integration/test_migrations.py
-- builds an old store from it. Do not change these blocks when the layout
-- changes.

-- name: layout_v2_meta
CREATE TABLE pinlater_meta (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  version INT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- name: layout_v2_stamp
INSERT INTO pinlater_meta (name, version) VALUES (%(name)s, 2)
