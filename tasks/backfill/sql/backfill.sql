-- The bulk backfill's runs and pages (tasks/backfill/records.py), loaded by
-- tasks/appdata/sql.py's SqlFile: a block starts at "-- name: NAME"; comment
-- lines are dropped; {database} is the app data's first shard database
-- (checked against a strict regex); every value is a %s parameter.
--
-- Times are ms since the epoch from the server's clock (NOW(3)), one clock
-- for every worker, so rates over "the last minute" are not skewed by hosts.

-- name: create_runs
-- state: running, then how it ended: finished, failed or cancelled (a
-- guarded UPDATE, once; finished_at is when). Pausing is the
-- backfill queue's (the job service's pause), not a state stored here.
-- plan: JSON {"shard": pages, ...}, fixed when the run starts.
CREATE TABLE IF NOT EXISTS {database}.backfill_runs (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  kind VARCHAR(64) NOT NULL,
  cluster VARCHAR(16) NOT NULL,
  page_size INT NOT NULL,
  total_pages INT NOT NULL,
  plan MEDIUMTEXT NOT NULL,
  state VARCHAR(16) NOT NULL,
  created_at BIGINT NOT NULL,
  finished_at BIGINT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB

-- name: create_pages
-- A row per page whose work has started; the page is done when done_at is
-- set. runs counts the starts of its work (a page redone after a crash
-- shows 2). by_done serves the progress counts and rates.
CREATE TABLE IF NOT EXISTS {database}.backfill_pages (
  run_id BIGINT UNSIGNED NOT NULL,
  shard INT NOT NULL,
  page INT NOT NULL,
  runs INT NOT NULL,
  started_at BIGINT NOT NULL,
  done_at BIGINT NULL,
  users INT NULL,
  cells BIGINT NULL,
  PRIMARY KEY (run_id, shard, page),
  KEY by_done (run_id, done_at)
) ENGINE=InnoDB

-- name: insert_run
-- Args: kind, cluster, page_size, total_pages, plan, state.
INSERT INTO {database}.backfill_runs (kind, cluster, page_size, total_pages, plan, state, created_at)
VALUES (%s, %s, %s, %s, %s, %s, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))

-- name: get_run
SELECT id, kind, cluster, page_size, total_pages, plan, state, created_at, finished_at
FROM {database}.backfill_runs WHERE id = %s

-- name: recent_runs
SELECT id, kind, cluster, page_size, total_pages, plan, state, created_at, finished_at
FROM {database}.backfill_runs ORDER BY id DESC LIMIT %s

-- name: end_run
-- Row count 1: this call ended the run; 0: it had ended already. Args:
-- the state it ends in (finished, failed, cancelled), run_id, and the two
-- states it may end from (running twice, or running and failed).
UPDATE {database}.backfill_runs SET state = %s, finished_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
WHERE id = %s AND state IN (%s, %s)

-- name: page_done_at
-- No row: never started; done_at NULL: started, not done.
SELECT done_at FROM {database}.backfill_pages WHERE run_id = %s AND shard = %s AND page = %s

-- name: page_started
INSERT INTO {database}.backfill_pages (run_id, shard, page, runs, started_at)
VALUES (%s, %s, %s, 1, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))
ON DUPLICATE KEY UPDATE runs = runs + 1, started_at = VALUES(started_at)

-- name: page_finished
-- Row count 1: this call finished the page; 0: another run of it had (a
-- job run twice at once after its claim timed out). Args: users, cells,
-- run_id, shard, page.
UPDATE {database}.backfill_pages SET done_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), users = %s, cells = %s
WHERE run_id = %s AND shard = %s AND page = %s AND done_at IS NULL

-- name: run_counts
-- Pages done, their users and cells, the same within the rate window, and
-- the server's time. Args: window ms, window ms, run_id.
SELECT COUNT(*), COALESCE(SUM(users), 0), COALESCE(SUM(cells), 0),
       COALESCE(SUM(done_at >= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - %s), 0),
       COALESCE(SUM(IF(done_at >= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - %s, users, 0)), 0),
       CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
FROM {database}.backfill_pages WHERE run_id = %s AND done_at IS NOT NULL

-- name: run_pages
-- Every page row of a run (operators and tests: which pages ran twice).
SELECT shard, page, runs, started_at, done_at FROM {database}.backfill_pages
WHERE run_id = %s ORDER BY shard, page
