-- The layout version of a MySQL shard or control store
-- (pinlater.stores.layout) and the statements of its migrations
-- (pinlater.stores.migrations). One row per store kind in the database:
-- 'shard' or 'control' (the two may share a database).

-- name: meta_create
CREATE TABLE IF NOT EXISTS pinlater_meta (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  version INT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- name: table_exists
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = %(name)s

-- name: meta_read
SELECT version FROM pinlater_meta WHERE name = %(name)s

-- name: meta_stamp
-- A new store: several processes may open it at once, the first one wins.
INSERT IGNORE INTO pinlater_meta (name, version) VALUES (%(name)s, %(version)s)

-- name: meta_write
-- After a migration step; never back to an older version.
INSERT INTO pinlater_meta (name, version) VALUES (%(name)s, %(version)s)
ON DUPLICATE KEY UPDATE version = GREATEST(version, VALUES(version))

-- name: shard_v2_deleted_queues
-- Shard layout 2 -> 3: the queues deleted on the shard. Frozen, like every
-- step: a new shard gets the same table from the backend's
-- create_deleted_queues_table (tests/integration/test_migrations.py
-- compares the two).
CREATE TABLE IF NOT EXISTS deleted_queues (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- name: shard_v3_trace_column
-- Shard layout 3 -> 4: each job's trace context (W3C traceparent). Frozen;
-- new job tables get the same column from create_job_table.
ALTER TABLE {table} ADD COLUMN trace VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER claim

-- name: shard_v4_key_column
-- Shard layout 4 -> 5: each job's fairness key. Frozen, as the blocks
-- below; new stores get the same from create_job_table and the
-- create_*_table blocks of mysql.sql.
ALTER TABLE {table} ADD COLUMN fkey VARBINARY(64) NULL AFTER trace

-- name: shard_v4_lanes
CREATE TABLE IF NOT EXISTS pinlater_lanes (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  turn BIGINT NULL,
  due BIGINT NULL,
  PRIMARY KEY (jobs, lane),
  KEY by_turn (jobs, turn),
  KEY by_due (jobs, due, lane)
) ENGINE=InnoDB

-- name: shard_v4_lane_jobs
CREATE TABLE IF NOT EXISTS pinlater_lane_jobs (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  run_after BIGINT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (jobs, lane, run_after, id),
  KEY by_id (jobs, id)
) ENGINE=InnoDB

-- name: shard_v4_fair
CREATE TABLE IF NOT EXISTS pinlater_fair (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  turn BIGINT NOT NULL,
  plain_turn BIGINT NOT NULL,
  PRIMARY KEY (jobs)
) ENGINE=InnoDB

-- name: shard_v5_unique
-- Shard layout 5 -> 6: the unique keys' table. Frozen; new stores get the
-- same from create_unique_table.
CREATE TABLE IF NOT EXISTS pinlater_unique (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  ukey VARBINARY(200) NOT NULL,
  priority INT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (queue, ukey),
  KEY by_job (queue, priority, id)
) ENGINE=InnoDB

-- name: shard_v6_unique_column
-- Shard layout 6 -> 7: each job's unique key, taken by the table's
-- trigger (next block). Frozen, as the trigger; new job tables get both
-- from create_job_table and unique_trigger.
ALTER TABLE {table} ADD COLUMN ukey VARBINARY(200) NULL AFTER fkey

-- name: shard_v6_unique_trigger
CREATE TRIGGER IF NOT EXISTS {table} AFTER INSERT ON {table} FOR EACH ROW
IF NEW.ukey IS NOT NULL THEN
  INSERT INTO pinlater_unique (queue, ukey, priority, id) VALUES ({queue}, NEW.ukey, {priority}, NEW.id);
END IF

-- name: control_v2_bucket_bytes
-- Control store layout 2 -> 3: rate bucket names (they end with a
-- fairness key) and idempotency keys compared as bytes. A VARCHAR's
-- collation pads, so "k" and "k " were one row: two tenants' keys shared
-- a bucket, and an enqueue with key "k " was answered as the one with "k".
-- And each bucket's expiry, so that idle ones are dropped (per-key buckets
-- were kept forever, one row per key ever served).
ALTER TABLE pinlater_rate_bucket MODIFY bucket VARBINARY(1020) NOT NULL,
  ADD COLUMN IF NOT EXISTS expires_at BIGINT NOT NULL DEFAULT 0 AFTER ts,
  ADD KEY IF NOT EXISTS by_expiry (expires_at)

-- name: control_v2_bucket_expiry
-- The buckets kept so far: dropped once idle for the longest a bucket is.
UPDATE pinlater_rate_bucket SET expires_at = ts + 604800000 WHERE expires_at = 0

-- name: control_v2_idempotency_bytes
ALTER TABLE pinlater_idempotency MODIFY k VARBINARY(1020) NOT NULL
