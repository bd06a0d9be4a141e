-- Storage layout 5 of the MySQL shards, frozen: layout 4's tables
-- (layout_v4.sql) with the fairness key column on job tables and the
-- tables of fair service, as PinLater made them before unique keys had a
-- table. tests/integration/test_migrations.py builds an old store from it.
-- Do not change these blocks when the layout changes.

-- name: layout_v5_key_column
ALTER TABLE {table} ADD COLUMN fkey VARBINARY(64) NULL AFTER trace

-- name: layout_v5_lanes
CREATE TABLE pinlater_lanes (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  turn BIGINT NULL,
  due BIGINT NULL,
  PRIMARY KEY (jobs, lane),
  KEY by_turn (jobs, turn),
  KEY by_due (jobs, due, lane)
) ENGINE=InnoDB

-- name: layout_v5_lane_jobs
CREATE TABLE pinlater_lane_jobs (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  run_after BIGINT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (jobs, lane, run_after, id),
  KEY by_id (jobs, id)
) ENGINE=InnoDB

-- name: layout_v5_fair
CREATE TABLE pinlater_fair (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  turn BIGINT NOT NULL,
  plain_turn BIGINT NOT NULL,
  PRIMARY KEY (jobs)
) ENGINE=InnoDB

-- name: layout_v5_stamp
UPDATE pinlater_meta SET version = 5 WHERE name = 'shard'
