-- Every statement of the MySQL (MariaDB) shard backend and control store.
-- Parsed once by pinlater/kit/sqlblocks.py: a block starts at a line
-- "-- name: NAME" and runs to the next one; comment lines are dropped.
--
-- Placeholders the loader fills (never with caller input):
--   {table}     a job table `q_<queue>_p<N>`, checked against a strict regex
--   {database}  the shard database from the DSN, checked likewise
--   {now}       the block _now: the server clock in ms. NOW(3) is fixed for
--               the whole statement, so every {now} in one statement agrees
--               (run_after = updated_at + delay holds exactly).
--   {rows}      the block "<name>.row" repeated once per item: SELECT rows
--               joined by UNION ALL (a derived table of per-item values),
--               VALUES tuples joined by commas
--   {ids}       n positional %s markers for an IN (...) list
--   {body}      the column body, or NULL when bodies are not wanted (so
--               InnoDB never reads the blob pages)
--   {trace}     the column trace (layout 4 on), or NULL
--   {fkey}      the column fkey, the job's fairness key (layout 5 on), or NULL
--   {priority}  a priority (1..100), as a number: a constant column, or
--               part of a local variable's name in the dequeue
--   {page}      a scan statement of this file (with bodies), as a derived
--               table
--   {held}      what an ACK's item must equal: the claim column (items that
--               name their claim: exactly that claim) or its source part
--               SUBSTRING(claim, 18) (items that give only a source)
-- Every value is a %s / %(name)s parameter.
--
-- Index hints: the plan must not depend on statistics. With few RUNNING
-- rows in the stats the optimizer would otherwise reach "WHERE id IN (...)
-- AND state = 1" through the state index and, once thousands of jobs run,
-- scan all of them for each ACK. The per-item UPDATEs read the small
-- derived table of items first (STRAIGHT_JOIN), then each job by primary key.
--
-- States: 0 PENDING, 1 RUNNING, 2 SUCCEEDED, 3 FAILED; a pending job with
-- a fairness key is 4 once in its lane, 5 until then (the lanes section).
-- 4000 is
-- CUSTOM_STATUS_MAX. A claim is TOKEN@SOURCE with a 16-char token, so the
-- source starts at character 18; claims and sources compare as bytes (no
-- collation, no trailing-space padding), exactly like Python's ==.

-- name: _now
CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)

-- ---------------------------------------------------------------- session

-- name: session_isolation
-- READ COMMITTED: no gap locks (but the claim transaction, see
-- dequeue_start). At either level a claiming UPDATE ... LIMIT waits for
-- rows another dequeuer has claimed and not committed yet (their last
-- committed version still matches), then passes them: hence a dequeue
-- commits as soon as it has claimed.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: session_setup
-- UTC so that UNIX_TIMESTAMP(NOW(3)) has no DST ambiguity; a lock wait
-- shorter than the socket timeout so lock trouble surfaces as 1205 (retried)
-- rather than as a dead connection.
SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = %(lock_wait_s)s

-- name: rollback
ROLLBACK

-- name: begin
-- An inline transaction's (pool.py: INLINE) at the session's isolation level.
START TRANSACTION

-- name: commit
COMMIT

-- name: server_autoinc
SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment

-- name: ping
SELECT 1

-- name: probe
-- The health prober's write, in one round trip: a row of its own (no queue
-- name has a space) inserted and rolled back, so a read-only or full server
-- refuses it while nothing is ever kept, logged or replicated.
START TRANSACTION;
INSERT INTO queues (name, priorities) VALUES (%s, 0);
ROLLBACK

-- name: now
SELECT {now}

-- ---------------------------------------------------------------- schema

-- name: create_database
CREATE DATABASE IF NOT EXISTS {database} CHARACTER SET utf8mb4

-- name: create_queues_table
CREATE TABLE IF NOT EXISTS queues (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  priorities INT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- Queues deleted on this shard and not created again since: a missing
-- table of one is not made again for a caller whose config is stale.
-- name: create_deleted_queues_table
CREATE TABLE IF NOT EXISTS deleted_queues (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- A job table. Its unique keys (ukey) are taken by the trigger
-- unique_trigger; a table refuses them (ukey_untaken) until that trigger
-- is made and unique_armed drops the constraint, so that a process that
-- dies in between leaves a table that refuses keys, never one that takes
-- them without recording them.
-- name: create_job_table
CREATE TABLE IF NOT EXISTS {table} (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  state TINYINT NOT NULL,
  body LONGBLOB NOT NULL,
  attempts_allowed INT NOT NULL,
  attempts_remaining INT NOT NULL,
  custom_status VARCHAR(4000) NOT NULL DEFAULT '',
  created_at BIGINT NOT NULL,
  run_after BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  claim VARCHAR(255) COLLATE utf8mb4_bin NULL,
  trace VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
  fkey VARBINARY(64) NULL,
  ukey VARBINARY(200) NULL,
  PRIMARY KEY (id),
  KEY by_run_after (state, run_after, id),
  KEY by_updated_at (state, updated_at, id),
  KEY by_claim (claim),
  CONSTRAINT ukey_untaken CHECK (ukey IS NULL)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: unique_trigger
-- From layout 7 on: a job stored with a unique key takes it in the same
-- statement, by a row of pinlater_unique naming the job, which fails the
-- whole INSERT (1062) when the key has a row already. The trigger is
-- named as its table; the key stays in the job's row. Made again (one
-- step, under the table's lock) when the account that made it is gone.
CREATE OR REPLACE TRIGGER {table} AFTER INSERT ON {table} FOR EACH ROW
IF NEW.ukey IS NOT NULL THEN
  INSERT INTO pinlater_unique (queue, ukey, priority, id) VALUES ({queue}, NEW.ukey, {priority}, NEW.id);
END IF

-- name: unique_unarmed
-- Of these job tables, those whose trigger may be missing yet.
SELECT table_name FROM information_schema.check_constraints
WHERE constraint_schema = DATABASE() AND constraint_name = 'ukey_untaken' AND table_name IN ({ids})

-- name: unique_triggered
-- Of these job tables, those with a trigger.
SELECT event_object_table FROM information_schema.triggers
WHERE trigger_schema = DATABASE() AND event_object_table IN ({ids})

-- name: unique_armed
ALTER TABLE {table} DROP CONSTRAINT IF EXISTS ukey_untaken

-- Fair service between fairness keys (pinlater/stores/mysql/lanes.py):
-- per job table, its lanes (one per key; NULL turn: waiting for due),
-- the pending keyed jobs in each, and the turn counter with the turn of
-- the jobs without a key. One table each per shard, keyed by job table.
-- name: create_lanes_table
CREATE TABLE IF NOT EXISTS pinlater_lanes (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  turn BIGINT NULL,
  due BIGINT NULL,
  PRIMARY KEY (jobs, lane),
  KEY by_turn (jobs, turn),
  KEY by_due (jobs, due, lane)
) ENGINE=InnoDB

-- name: create_lane_jobs_table
CREATE TABLE IF NOT EXISTS pinlater_lane_jobs (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  lane VARBINARY(64) NOT NULL,
  run_after BIGINT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (jobs, lane, run_after, id),
  KEY by_id (jobs, id)
) ENGINE=InnoDB

-- name: create_fair_table
CREATE TABLE IF NOT EXISTS pinlater_fair (
  jobs VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  turn BIGINT NOT NULL,
  plain_turn BIGINT NOT NULL,
  PRIMARY KEY (jobs)
) ENGINE=InnoDB

-- Unique keys (Job.unique): per queue, the job that took each key. A key
-- is held while that job is PENDING or RUNNING (or SUCCEEDED within the
-- queue's unique period): unique_states reads it, so a row whose job has
-- ended is not honoured, and goes when the job leaves storage.
-- name: create_unique_table
CREATE TABLE IF NOT EXISTS pinlater_unique (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  ukey VARBINARY(200) NOT NULL,
  priority INT NOT NULL,
  id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (queue, ukey),
  KEY by_job (queue, priority, id)
) ENGINE=InnoDB

-- name: drop_lanes
DELETE FROM pinlater_lanes WHERE jobs = %(jobs)s

-- name: drop_lane_jobs
DELETE FROM pinlater_lane_jobs WHERE jobs = %(jobs)s

-- name: drop_fair
DELETE FROM pinlater_fair WHERE jobs = %(jobs)s

-- name: drop_unique
DELETE FROM pinlater_unique WHERE queue = %(name)s

-- name: register_queue
INSERT INTO queues (name, priorities) VALUES (%(name)s, %(priorities)s)
ON DUPLICATE KEY UPDATE priorities = GREATEST(priorities, %(priorities)s)

-- name: unregister_queue
DELETE FROM queues WHERE name = %(name)s

-- name: mark_queue_deleted
INSERT IGNORE INTO deleted_queues (name) VALUES (%(name)s)

-- name: unmark_queue_deleted
DELETE FROM deleted_queues WHERE name = %(name)s

-- name: queue_deleted
SELECT COUNT(*) FROM deleted_queues WHERE name = %(name)s

-- A named lock per queue and shard database, held while a queue's tables
-- are dropped or made again, so that neither runs in the middle of the other.
-- name: lock_queue
SELECT GET_LOCK(CONCAT('pinlater:', SHA1(CONCAT(DATABASE(), '/', %(name)s))), %(timeout)s)

-- name: unlock_queue
SELECT RELEASE_LOCK(CONCAT('pinlater:', SHA1(CONCAT(DATABASE(), '/', %(name)s))))

-- name: stored_queues
SELECT name, priorities FROM queues

-- name: list_tables
SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()

-- name: drop_job_table
DROP TABLE IF EXISTS {table}

-- ---------------------------------------------------------------- transitions

-- name: enqueue
INSERT INTO {table}
  (state, body, attempts_allowed, attempts_remaining, custom_status,
   created_at, run_after, updated_at, claim)
VALUES {rows}

-- name: enqueue.row
(0, %s, %s, %s, LEFT(%s, 4000), {now}, COALESCE(%s, {now}), {now}, NULL)

-- name: enqueue_traced
-- From layout 4 on: with each job's trace context.
INSERT INTO {table}
  (state, body, attempts_allowed, attempts_remaining, custom_status,
   created_at, run_after, updated_at, claim, trace)
VALUES {rows}

-- name: enqueue_traced.row
(0, %s, %s, %s, LEFT(%s, 4000), {now}, COALESCE(%s, {now}), {now}, NULL, %s)

-- name: enqueue_keyed
-- From layout 5 on: with each job's trace context and fairness key; a
-- keyed job waits in state 5 for the next dequeue to put it in its lane.
INSERT INTO {table}
  (state, body, attempts_allowed, attempts_remaining, custom_status,
   created_at, run_after, updated_at, claim, trace, fkey)
VALUES {rows}

-- name: enqueue_keyed.row
(IF(%s IS NULL, 0, 5), %s, %s, %s, LEFT(%s, 4000), {now}, COALESCE(%s, {now}), {now}, NULL, %s, %s)

-- name: enqueue_unique
-- From layout 7 on: as enqueue_traced, with each job's unique key, which
-- the table's trigger (unique_trigger) takes.
INSERT INTO {table}
  (state, body, attempts_allowed, attempts_remaining, custom_status,
   created_at, run_after, updated_at, claim, trace, ukey)
VALUES {rows}

-- name: enqueue_unique.row
(0, %s, %s, %s, LEFT(%s, 4000), {now}, COALESCE(%s, {now}), {now}, NULL, %s, %s)

-- name: enqueue_unique_keyed
-- As enqueue_keyed, with each job's unique key.
INSERT INTO {table}
  (state, body, attempts_allowed, attempts_remaining, custom_status,
   created_at, run_after, updated_at, claim, trace, fkey, ukey)
VALUES {rows}

-- name: enqueue_unique_keyed.row
(IF(%s IS NULL, 0, 5), %s, %s, %s, LEFT(%s, 4000), {now}, COALESCE(%s, {now}), {now}, NULL, %s, %s, %s)

-- name: unique_lock
-- An enqueue with unique keys, first: each key's row made (id 0: no job)
-- or kept, and locked until the enqueue commits, so that two enqueues of
-- a key take turns. Keys in byte order, so that two calls lock in the
-- same order.
INSERT INTO pinlater_unique (queue, ukey, priority, id) VALUES {rows}
ON DUPLICATE KEY UPDATE id = id

-- name: unique_lock.row
(%s, %s, 0, 0)

-- name: unique_holders
-- Of the keys, those a job of this table holds: pending (0, 4, 5) or
-- running, or SUCCEEDED less than the queue's period ago.
SELECT u.ukey, u.id FROM pinlater_unique u JOIN {table} j FORCE INDEX (PRIMARY) ON j.id = u.id
WHERE u.queue = %s AND u.priority = %s AND u.ukey IN ({ids})
  AND (j.state IN (0, 1, 4, 5) OR (j.state = 2 AND j.updated_at > {now} - %s))

-- name: last_insert_id
SELECT LAST_INSERT_ID()

-- name: unique_begin
-- An enqueue with unique keys in one round trip when none is held: one
-- compound statement that locks the keys (unique_lock), counts the held
-- ones (unique_held) and, if none is, stores the jobs and takes their keys
-- (the INSERTs, each followed by last_insert_id, and unique_take) and
-- commits; else it rolls back, having stored nothing, and the caller goes
-- the two-round-trip way. Its last result: pl_held.
BEGIN NOT ATOMIC
  DECLARE pl_held INT DEFAULT 0;
  DECLARE pl_period BIGINT DEFAULT %s;
  START TRANSACTION

-- name: unique_held
-- {page}: unique_held_at of each of the queue's priorities, joined by OR.
SELECT COUNT(*) INTO pl_held FROM pinlater_unique u
WHERE u.queue = %s AND u.ukey IN ({ids}) AND ({page})

-- name: unique_held_at
-- A key's job at this priority holds it: pending (0, 4, 5) or running, or
-- SUCCEEDED less than pl_period ms ago.
EXISTS (SELECT 1 FROM {table} j FORCE INDEX (PRIMARY)
        WHERE u.priority = {priority} AND j.id = u.id
          AND (j.state IN (0, 1, 4, 5) OR (j.state = 2 AND j.updated_at > {now} - pl_period)))

-- name: unique_if_free
IF pl_held = 0 THEN

-- name: unique_end
  COMMIT;
ELSE
  ROLLBACK;
END IF;
SELECT pl_held;
END

-- name: unique_new
-- An enqueue with unique keys none of which has a row yet (the usual case
-- for a new key): each job INSERT followed by this, in a transaction, its
-- ids read from the INSERTs' own answers (no SELECT LAST_INSERT_ID()). A
-- key that has a row fails it (1062: nothing is stored, the transaction is
-- rolled back), and the caller checks the holders (unique_begin). Two
-- enqueues of a new key: the second waits for the first's row, then fails
-- so. Every job of the INSERT before has a key here, its row in order; the
-- priority and the ids' offsets are written in the text, so that a row
-- costs the client two arguments (a JSON_TABLE costs the server a
-- temporary table a statement, more than the rows at these sizes).
INSERT INTO pinlater_unique (queue, ukey, priority, id) VALUES {rows}

-- name: unique_new.row
(%s, %s, {priority}, LAST_INSERT_ID() + {offset})

-- name: unique_take
INSERT INTO pinlater_unique (queue, ukey, priority, id) VALUES {rows}
ON DUPLICATE KEY UPDATE priority = VALUES(priority), id = VALUES(id)

-- name: unique_take.row
-- The job's id: the first of the INSERT just before, plus the given step.
(%s, %s, %s, LAST_INSERT_ID() + %s)

-- name: unique_drop_gone
-- Jobs left storage (gc, delete): the keys they held go with them.
DELETE u FROM pinlater_unique u LEFT JOIN {table} j ON j.id = u.id
WHERE u.queue = %s AND u.priority = %s AND u.id IN ({ids}) AND j.id IS NULL

-- name: dequeue_begin
-- A dequeue is one round trip per shard whatever the number of priorities:
-- one compound statement (BEGIN NOT ATOMIC ... END) of these dequeue_*
-- blocks, so that only what is needed runs and only claimed jobs come back.
-- In one transaction, each priority in order claims what is still missing,
-- pl_left (a local variable: LIMIT takes one, and a priority is skipped
-- once the limit is met); while jobs are still missing, the look ahead
-- finds the next priority with runnable jobs. COMMIT comes before the
-- reads, so that the claimed rows are locked no longer than the claims
-- take (a concurrent dequeuer waits on them). Then each priority that
-- claimed something reads its jobs back by claim, one result set each,
-- tagged with the priority (a UNION of rows with the body would go through
-- a temporary table). A failure before COMMIT claims nothing.
BEGIN NOT ATOMIC
  DECLARE pl_left INT DEFAULT %s;
  DECLARE pl_fair INT DEFAULT 0

-- name: dequeue_declare
DECLARE pl_got_{priority} INT DEFAULT 0;
DECLARE pl_lanes_{priority} INT DEFAULT 0

-- name: dequeue_check
-- Whether the priority has keyed jobs (waiting for a lane, or in one): then
-- it is served by lanes (pinlater/stores/mysql/lanes.py). Read before the
-- claim transaction, at the session's READ COMMITTED: inside it, at
-- REPEATABLE READ, these reads locked gaps an ACK's index change needed,
-- and the two deadlocked. Each read sees what was committed when it ran,
-- so newcomers are looked for first: another dequeue's admission turns
-- them into lanes, and read the other way round, the lanes before and the
-- newcomers after it, neither was found and the dequeue got nothing.
SET pl_lanes_{priority} = EXISTS (SELECT 1 FROM {table} FORCE INDEX (by_run_after) WHERE state = 5)
    OR EXISTS (SELECT 1 FROM pinlater_lanes WHERE jobs = %s)

-- name: dequeue_start
-- The claim transaction alone runs at REPEATABLE READ (the session's level
-- is READ COMMITTED): a claim's index scan starts with the entries of jobs
-- claimed just before, delete-marked until purge removes them, and at READ
-- COMMITTED a locking read checks each of them against the clustered index
-- and its undo (ANALYZE of a one-job claim: 400-700 pages accessed, against
-- about 20 at REPEATABLE READ). The gap locks it takes are held only until
-- the COMMIT that follows the claims.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
START TRANSACTION

-- name: dequeue_claim
-- A priority served by lanes (dequeue_check): this statement stops before
-- it, and says which one it is (dequeue_fair), for the caller to go on.
IF pl_left > 0 AND pl_fair = 0 THEN
  IF pl_lanes_{priority} THEN
    SET pl_fair = {priority};
  ELSE
    UPDATE {table} FORCE INDEX (by_run_after)
    SET state = 1, claim = %s, updated_at = {now}
    WHERE state = 0 AND run_after <= {now}
    ORDER BY run_after, id
    LIMIT pl_left;
    SET pl_got_{priority} = ROW_COUNT(), pl_left = pl_left - pl_got_{priority};
  END IF;
END IF

-- name: dequeue_if_missing
-- Around the look ahead (look_ahead branches): only while jobs are missing.
IF pl_left > 0 AND pl_fair = 0 THEN

-- name: dequeue_end_if
END IF

-- name: dequeue_commit
COMMIT

-- name: dequeue_read
IF pl_got_{priority} > 0 THEN
  SELECT id, body, attempts_allowed, attempts_remaining, {priority} AS priority, {trace} AS trace, run_after
  FROM {table} FORCE INDEX (by_claim)
  WHERE claim = %s AND state = 1
  ORDER BY run_after, id;
END IF

-- name: dequeue_fair
IF pl_fair > 0 THEN
  SELECT pl_fair AS fair;
END IF

-- name: dequeue_end
END

-- name: dequeue_undo
-- A dequeue that failed once it may have committed (a read back that
-- failed): its claims, held by nobody, are PENDING again. Only jobs
-- without a fairness key are claimed so (dequeue_claim).
UPDATE {table} FORCE INDEX (by_claim) SET state = 0, claim = NULL, updated_at = {now}
WHERE claim = %s AND state = 1

-- name: peek
-- One per priority, as separate results (see dequeue_begin): the jobs a
-- dequeue without lanes would take, keyed or not.
SELECT * FROM (
  (SELECT id, body, attempts_allowed, attempts_remaining, {priority} AS priority, {trace} AS trace, run_after
   FROM {table} FORCE INDEX (by_run_after) WHERE state = 0 AND run_after <= {now} ORDER BY run_after, id LIMIT %s)
  UNION ALL
  (SELECT id, body, attempts_allowed, attempts_remaining, {priority} AS priority, {trace} AS trace, run_after
   FROM {table} FORCE INDEX (by_run_after) WHERE state = 4 AND run_after <= {now} ORDER BY run_after, id LIMIT %s)
  UNION ALL
  (SELECT id, body, attempts_allowed, attempts_remaining, {priority} AS priority, {trace} AS trace, run_after
   FROM {table} FORCE INDEX (by_run_after) WHERE state = 5 AND run_after <= {now} ORDER BY run_after, id LIMIT %s)
) AS due ORDER BY run_after, id LIMIT %s

-- name: look_ahead
-- One branch per look-ahead priority, joined by UNION ALL, then ORDER BY
-- pos LIMIT 1: the first priority (in the order given) with a runnable job.
(SELECT %s AS pos, %s AS priority FROM {table} FORCE INDEX (by_run_after)
 WHERE state IN (0, 4, 5) AND run_after <= {now} LIMIT 1)

-- ------------------------------------------------ fair service (lanes.py)

-- name: fair_make
-- Only when fair_lock found no row (the table's first dequeue by lanes).
-- Not INSERT IGNORE: on an existing row that takes a shared lock, and two
-- dequeues holding one each deadlock on fair_lock. This takes the row's
-- exclusive lock at once.
INSERT INTO pinlater_fair (jobs, turn, plain_turn) VALUES (%(jobs)s, 0, 0)
ON DUPLICATE KEY UPDATE turn = turn

-- name: fair_lock
-- Serves one table's lanes at a time: held until the dequeue commits.
SELECT turn, plain_turn FROM pinlater_fair WHERE jobs = %(jobs)s FOR UPDATE

-- name: fair_store
UPDATE pinlater_fair SET turn = %s, plain_turn = %s WHERE jobs = %s

-- name: lanes_bound
-- The newcomers a transaction admits, in the order they came (updated_at,
-- id), end at the ADMIT-th (lanes.py): so that no statement's time grows
-- with a backlog of them. Fewer: lanes_now's bound (every one) stands.
-- This and the rest of the admission begin "WHERE @pl_newcomers": without
-- newcomers (lanes_now) the optimizer sees an impossible WHERE and reads
-- nothing, which costs the server less than their index dives and the
-- grouping's temporary table.
SELECT updated_at, id INTO @pl_bound_at, @pl_bound_id
FROM {table} FORCE INDEX (by_updated_at) WHERE @pl_newcomers AND state = 5
ORDER BY updated_at, id
LIMIT 1 OFFSET %(admit_last)s

-- name: lanes_newcomers
-- Keyed jobs that entered pending since the last dequeue, up to the bound,
-- join their lanes' jobs; then lanes_touched, lanes_admit (these, not
-- later ones).
INSERT IGNORE INTO pinlater_lane_jobs (jobs, lane, run_after, id)
SELECT %(jobs)s, fkey, run_after, id FROM {table} FORCE INDEX (by_updated_at)
WHERE @pl_newcomers AND state = 5 AND (updated_at < @pl_bound_at OR (updated_at = @pl_bound_at AND id <= @pl_bound_id))

-- name: lanes_touched
-- Per lane of the newcomers: the first (updated_at, id) of those due when
-- they came (NULL: none was), their earliest run_after, and the lane's
-- turn and due as stored (known: 0 when it has no row yet).
SELECT g.fkey, g.first_due, g.soonest, l.turn, l.due, l.lane IS NOT NULL AS known
FROM (SELECT t.fkey,
             MIN(CASE WHEN t.run_after <= t.updated_at
                      THEN CONCAT(LPAD(t.updated_at, 20, '0'), LPAD(t.id, 20, '0')) END) AS first_due,
             MIN(t.run_after) AS soonest
      FROM {table} AS t FORCE INDEX (by_updated_at)
      STRAIGHT_JOIN pinlater_lane_jobs AS lj FORCE INDEX (by_id) ON lj.jobs = %(jobs)s AND lj.id = t.id
      WHERE @pl_newcomers AND t.state = 5
        AND (t.updated_at < @pl_bound_at OR (t.updated_at = @pl_bound_at AND t.id <= @pl_bound_id))
      GROUP BY t.fkey) AS g
LEFT JOIN pinlater_lanes AS l ON l.jobs = %(jobs)s AND l.lane = g.fkey

-- name: has_newcomers
SELECT EXISTS (SELECT 1 FROM {table} FORCE INDEX (by_run_after) WHERE state = 5)

-- name: lanes_admit
-- The newcomers are in their lanes from now on. From the job table's
-- newcomers to their lane entries (STRAIGHT_JOIN), never the other way:
-- a lane's entries are many.
UPDATE {table} AS t FORCE INDEX (by_updated_at)
STRAIGHT_JOIN pinlater_lane_jobs AS lj FORCE INDEX (by_id) ON lj.jobs = %(jobs)s AND lj.id = t.id
SET t.state = 4
WHERE t.state = 5
  AND (t.updated_at < @pl_bound_at OR (t.updated_at = @pl_bound_at AND t.id <= @pl_bound_id))

-- name: lanes_put
INSERT INTO pinlater_lanes (jobs, lane, turn, due) VALUES {rows}
ON DUPLICATE KEY UPDATE turn = VALUES(turn), due = VALUES(due)

-- name: lanes_put.row
(%s, %s, %s, %s)

-- name: lanes_drop
DELETE FROM pinlater_lanes WHERE jobs = %s AND lane IN ({ids})

-- name: lanes_now
-- The time of a dequeue by lanes, held for its later statements (lanes_due),
-- the newcomers' bound that admits every one (lanes_bound), and whether
-- newcomers wait at all.
SET @pl_lanes_now := {now}, @pl_bound_at := 9223372036854775807, @pl_bound_id := 0,
    @pl_newcomers := EXISTS (SELECT 1 FROM {table} FORCE INDEX (by_updated_at) WHERE state = 5)

-- name: lanes_now_read
SELECT @pl_lanes_now, @pl_newcomers

-- name: lanes_bound_read
-- Whether lanes_bound cut the newcomers short.
SELECT @pl_bound_at < 9223372036854775807

-- name: lanes_due
-- Waiting lanes whose first job is due at the dequeue's time (lanes_now),
-- in the order they join the turns.
SELECT lane, due FROM pinlater_lanes FORCE INDEX (by_due)
WHERE jobs = %(jobs)s AND turn IS NULL AND due <= @pl_lanes_now
ORDER BY due, lane
LIMIT %(due_limit)s

-- name: lanes_in_turn
-- With each lane's first job, 'run_after id' (NULL: the lane is empty): a
-- full page serves each of its lanes once at most (lanes.py's read_page),
-- so one index dive a lane here spares a round trip of lane_heads. Both
-- indexes forced: the page read in turn order (no sort of the table's
-- lanes, whatever the statistics say), each head by its lane's prefix of
-- the primary key (by_id would read every entry of the table). Not a
-- derived table: materialising the page cost more than the page.
SELECT l.lane, l.turn,
       (SELECT CONCAT(j.run_after, ' ', j.id) FROM pinlater_lane_jobs AS j FORCE INDEX (PRIMARY)
        WHERE j.jobs = %(jobs)s AND j.lane = l.lane ORDER BY j.run_after, j.id LIMIT 1) AS head
FROM pinlater_lanes AS l FORCE INDEX (by_turn)
WHERE l.jobs = %(jobs)s AND l.turn > %(after)s
ORDER BY l.turn
LIMIT %(page_limit)s

-- name: lane_heads
-- One branch per lane, joined by UNION ALL: its first jobs.
(SELECT lane, run_after, id FROM pinlater_lane_jobs
 WHERE jobs = %s AND lane = %s ORDER BY run_after, id LIMIT %s)

-- name: plain_heads
-- The first pending jobs without a key (lane '').
SELECT run_after, id FROM {table} FORCE INDEX (by_run_after)
WHERE state = 0
ORDER BY run_after, id
LIMIT %(limit)s

-- name: lane_jobs_take
DELETE FROM pinlater_lane_jobs WHERE jobs = %s AND id IN ({ids})

-- name: lanes_claim
UPDATE {table} FORCE INDEX (PRIMARY)
SET state = 1, claim = %s, updated_at = {now}
WHERE state IN (0, 4) AND id IN ({ids})

-- name: lanes_read
SELECT id, body, attempts_allowed, attempts_remaining, {priority} AS priority, {trace} AS trace, run_after
FROM {table} FORCE INDEX (by_claim)
WHERE claim = %s AND state = 1

-- name: lock_running
-- First step of every checkpoint batch (inside a transaction): lock the
-- jobs that are RUNNING so that the guarded UPDATE that follows applies to
-- exactly the items we decide on here (a heartbeat keeps the claim, so it
-- cannot leave a marker to read back as ACKs do).
SELECT id, claim FROM {table} FORCE INDEX (PRIMARY)
WHERE id IN ({ids}) AND state = 1
FOR UPDATE

-- name: ack_succeeded
-- ACKs are one statement per table and batch, no locking read: per-item
-- values are ELT(FIELD(id, ids...), values...) ({ids}: one marker per item),
-- the guard is in the WHERE, and claim takes this statement's own marker so
-- that a partly stale batch can be read back (ack_applied) to tell applied
-- items from stale ones. A single item's row count says it all: its marker
-- is NULL and the claim stays (no write to the by_claim index). One
-- statement's items all name their claim or all give a source ({held}).
-- Order of %s: marker, ids, statuses, ids, ids, claims or sources.
UPDATE {table} FORCE INDEX (PRIMARY)
SET state = 2,
    claim = COALESCE(%s, claim),
    updated_at = {now},
    custom_status = RIGHT(CONCAT(custom_status, ELT(FIELD(id, {ids}), {ids})), 4000)
WHERE id IN ({ids}) AND state = 1
  AND CAST({held} AS BINARY) = CAST(ELT(FIELD(id, {ids}), {ids}) AS BINARY)

-- name: ack_failed
-- As ack_succeeded. A single-table UPDATE applies its assignments left to
-- right, so run_after and state read attempts_remaining before it is
-- decremented (it is assigned last). The delay: the item's own, else the
-- policy's delay table (a JSON array) at the job's retry number, capped at
-- its last entry. Order of %s: ids, delays, table, last index, ids,
-- statuses, marker, ids, ids, claims or sources.
UPDATE {table} FORCE INDEX (PRIMARY)
SET run_after = IF(attempts_remaining > 1,
      {now} + COALESCE(
        CAST(ELT(FIELD(id, {ids}), {ids}) AS SIGNED),
        CAST(JSON_EXTRACT(%s, CONCAT('$[', LEAST(GREATEST(attempts_allowed - attempts_remaining, 0), %s), ']'))
             AS SIGNED)),
      run_after),
    state = IF(attempts_remaining > 1, IF({fkey} IS NULL, 0, 5), 3),
    custom_status = RIGHT(CONCAT(custom_status, ELT(FIELD(id, {ids}), {ids})), 4000),
    claim = COALESCE(%s, claim),
    updated_at = {now},
    attempts_remaining = IF(attempts_remaining > 1, attempts_remaining - 1, 0)
WHERE id IN ({ids}) AND state = 1
  AND CAST({held} AS BINARY) = CAST(ELT(FIELD(id, {ids}), {ids}) AS BINARY)

-- name: ack_applied
SELECT id FROM {table} FORCE INDEX (by_claim) WHERE claim = %s

-- name: checkpoint
-- NULL in v means "leave as is"; run_after: the given one, else now when
-- moving to PENDING, else unchanged. v.claim is the claim lock_running read
-- and the item was found to hold, so the guard repeats that decision.
UPDATE ({rows}) AS v STRAIGHT_JOIN {table} AS t FORCE INDEX (PRIMARY) ON t.id = v.id
SET t.updated_at = {now},
    t.body = COALESCE(v.body, t.body),
    t.attempts_allowed = COALESCE(v.attempts, t.attempts_allowed),
    t.attempts_remaining = COALESCE(v.attempts, t.attempts_remaining),
    t.custom_status = LEFT(CONCAT(v.prepend, t.custom_status), 4000),
    t.run_after = COALESCE(v.run_after, IF(v.to_pending, {now}, t.run_after)),
    t.state = IF(v.to_pending, IF({fkey} IS NULL, 0, 5), 1),
    t.claim = IF(v.to_pending, NULL, t.claim)
WHERE t.state = 1 AND CAST(t.claim AS BINARY) = v.claim

-- name: checkpoint.row
SELECT %s AS id, CAST(%s AS BINARY) AS claim, %s AS body, %s AS attempts,
       %s AS prepend, %s AS run_after, %s AS to_pending

-- name: running_owners
-- Running jobs per claim owner (the token's first %s characters) and key.
SELECT LEFT(claim, %s) AS owner, {fkey} AS k, COUNT(*) FROM {table} WHERE state = 1 GROUP BY owner, k

-- name: lanes_first_keys
-- The keys a dequeue serves first (lane_keys): lanes in turn with a due
-- job (a lane served empty stays in turn until a dequeue meets it),
-- waiting lanes that are due, and keyed jobs not in their lanes yet.
(SELECT l.lane FROM pinlater_lanes AS l FORCE INDEX (by_turn)
 WHERE l.jobs = %(jobs)s AND l.turn IS NOT NULL
   AND EXISTS (SELECT 1 FROM pinlater_lane_jobs AS lj
               WHERE lj.jobs = l.jobs AND lj.lane = l.lane AND lj.run_after <= {now})
 ORDER BY l.turn LIMIT %(limit)s)
UNION
(SELECT lane FROM pinlater_lanes FORCE INDEX (by_due)
 WHERE jobs = %(jobs)s AND turn IS NULL AND due <= {now} ORDER BY due LIMIT %(limit)s)
UNION
(SELECT fkey FROM {table} FORCE INDEX (by_run_after) WHERE state = 5 ORDER BY run_after LIMIT %(limit)s)

-- name: expire_repend
UPDATE {table} FORCE INDEX (by_updated_at)
SET state = IF({fkey} IS NULL, 0, 5), attempts_remaining = attempts_remaining - 1, run_after = {now},
    updated_at = {now}, claim = NULL
WHERE state = 1 AND updated_at <= {now} - %(timeout_ms)s AND attempts_remaining > 1
ORDER BY updated_at, id
LIMIT %(limit)s

-- name: expire_fail
UPDATE {table} FORCE INDEX (by_updated_at)
SET state = 3, attempts_remaining = 0, updated_at = {now}, claim = NULL
WHERE state = 1 AND updated_at <= {now} - %(timeout_ms)s AND attempts_remaining <= 1
ORDER BY updated_at, id
LIMIT %(limit)s

-- name: gc_pick
-- DELETE takes no index hints, and without one sorts every job of the state:
-- pick the oldest ids through the index, then delete them, guard repeated.
SELECT id FROM {table} FORCE INDEX (by_updated_at)
WHERE state = %(state)s AND updated_at <= {now} - %(older_than_ms)s
ORDER BY updated_at, id
LIMIT %(limit)s

-- name: gc_delete
DELETE FROM {table} WHERE state = %s AND updated_at <= {now} - %s AND id IN ({ids})

-- name: release
-- Pending jobs without a fairness key (state 0) due later become due now.
UPDATE {table} FORCE INDEX (PRIMARY) SET run_after = {now}
WHERE id IN ({ids}) AND state = 0 AND run_after > {now}

-- name: release_states
SELECT id, state FROM {table} FORCE INDEX (PRIMARY) WHERE id IN ({ids})

-- name: retry_failed
UPDATE {table} FORCE INDEX (by_updated_at)
SET state = IF({fkey} IS NULL, 0, 5), attempts_allowed = %(attempts)s, attempts_remaining = %(attempts)s,
    run_after = COALESCE(%(run_after)s, {now}), updated_at = {now}
WHERE state = 3
ORDER BY updated_at DESC, id DESC
LIMIT %(limit)s

-- name: delete_ids
DELETE FROM {table} WHERE state = %s AND id IN ({ids})

-- name: delete_pending_ids
-- Pending jobs, keyed or not; then lane_jobs_take for those in a lane.
DELETE FROM {table} WHERE state IN (0, 4, 5) AND id IN ({ids})

-- name: cancel_lock
-- The jobs a cancel may end, as they are, locked until it commits.
SELECT id, state, claim, {fkey} FROM {table} FORCE INDEX (PRIMARY) WHERE id IN ({ids}) FOR UPDATE

-- name: cancel_end
-- Pending (keyed or not) and running jobs end FAILED; then lane_jobs_take
-- for those that were in a lane.
UPDATE {table} FORCE INDEX (PRIMARY)
SET state = 3, attempts_remaining = 0, claim = NULL, updated_at = {now},
    custom_status = RIGHT(CONCAT(custom_status, %s), 4000)
WHERE id IN ({ids}) AND state IN (0, 1, 4, 5)

-- name: delete_pick
-- Then delete_ids, for the same reason as gc_pick.
SELECT id FROM {table} FORCE INDEX (by_updated_at)
WHERE state = %(state)s
LIMIT %(limit)s

-- name: delete_pick_pending
SELECT id FROM {table} FORCE INDEX (by_updated_at)
WHERE state IN (0, 4, 5)
LIMIT %(limit)s

-- ---------------------------------------------------------------- reads

-- name: count_pending_now
SELECT COUNT(*) FROM {table} FORCE INDEX (by_run_after)
WHERE state IN (0, 4, 5) AND run_after <= {now}

-- name: count_pending_future
SELECT COUNT(*) FROM {table} FORCE INDEX (by_run_after)
WHERE state IN (0, 4, 5) AND run_after > {now}

-- name: count_state
SELECT COUNT(*) FROM {table} FORCE INDEX (by_updated_at)
WHERE state = %(state)s

-- name: scan_pending_now
-- Cursor (st, id): rows strictly after it in (sort time desc, id desc).
-- Pending jobs are in state 0, or 4 and 5 with a key: a page of each,
-- merged.
SELECT * FROM (
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 0 AND run_after <= {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
  UNION ALL
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 4 AND run_after <= {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
  UNION ALL
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 5 AND run_after <= {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
) AS pending
ORDER BY run_after DESC, id DESC
LIMIT %(limit)s

-- name: scan_pending_future
SELECT * FROM (
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 0 AND run_after > {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
  UNION ALL
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 4 AND run_after > {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
  UNION ALL
  (SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
          created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
   FROM {table} FORCE INDEX (by_run_after)
   WHERE state = 5 AND run_after > {now}
     AND run_after <= %(st)s AND (run_after < %(st)s OR id < %(id)s)
   ORDER BY run_after DESC, id DESC
   LIMIT %(limit)s)
) AS pending
ORDER BY run_after DESC, id DESC
LIMIT %(limit)s

-- name: scan_state
-- Every state but PENDING sorts by updated_at.
SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
FROM {table} FORCE INDEX (by_updated_at)
WHERE state = %(state)s
  AND updated_at <= %(st)s AND (updated_at < %(st)s OR id < %(id)s)
ORDER BY updated_at DESC, id DESC
LIMIT %(limit)s

-- name: scan_within
-- A scan page with bodies sent only while the page's bodies so far come to
-- at most %(budget)s bytes: the body that would take it past comes as NULL
-- (withheld), and so does every later one. The window runs over the
-- page's rows only; in scan order (the sort time is run_after while
-- PENDING, updated_at otherwise).
SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, claim,
       IF(SUM(LENGTH(body)) OVER (ORDER BY IF(state IN (0, 4, 5), run_after, updated_at) DESC, id DESC
                                  ROWS UNBOUNDED PRECEDING) <= %(budget)s, body, NULL),
       fkey
FROM ({page}) AS page
ORDER BY IF(state IN (0, 4, 5), run_after, updated_at) DESC, id DESC

-- name: lookup
SELECT id, state, attempts_allowed, attempts_remaining, custom_status,
       created_at, run_after, updated_at, claim, {body}, {fkey} AS fkey
FROM {table} FORCE INDEX (PRIMARY)
WHERE id IN ({ids})

-- name: lookup_within
-- lookup with the bodies only if those found come to at most the first %s
-- bytes together; otherwise every body is NULL (withheld). The ids come
-- twice: for the total (a one-row derived table, read in the same
-- statement, so it agrees with the rows) and for the rows. A window
-- (SUM() OVER ()) cost twice as much as this on MariaDB 10.11.
SELECT j.id, j.state, j.attempts_allowed, j.attempts_remaining, j.custom_status,
       j.created_at, j.run_after, j.updated_at, j.claim,
       IF(total.bytes <= %s, j.body, NULL), {fkey} AS fkey
FROM {table} AS j FORCE INDEX (PRIMARY)
JOIN (SELECT SUM(LENGTH(body)) AS bytes FROM {table} FORCE INDEX (PRIMARY) WHERE id IN ({ids})) AS total
WHERE j.id IN ({ids})

-- ---------------------------------------------------------------- control store

-- name: ctl_create_config_table
CREATE TABLE IF NOT EXISTS pinlater_queue_config (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  config MEDIUMTEXT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: ctl_bucket_pads
-- Whether bucket names are still compared padded (a control store at
-- layout 2: "k" and "k " are one row).
SELECT COUNT(*) FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = 'pinlater_rate_bucket' AND column_name = 'bucket'
  AND data_type = 'varchar'

-- name: ctl_create_bucket_table
-- expires_at: when the bucket, idle, is full again and may be dropped
-- (ctl_purge_buckets); 0 while a row is being made, and for rows of code
-- that predates it, which are never dropped.
CREATE TABLE IF NOT EXISTS pinlater_rate_bucket (
  bucket VARBINARY(1020) NOT NULL,
  tokens DOUBLE NOT NULL,
  ts BIGINT NOT NULL,
  expires_at BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (bucket),
  KEY by_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: ctl_get_config
SELECT config FROM pinlater_queue_config WHERE name = %(name)s

-- name: ctl_list_configs
SELECT name, config FROM pinlater_queue_config

-- name: ctl_insert_config
INSERT INTO pinlater_queue_config (name, config) VALUES (%(name)s, %(config)s)

-- name: ctl_lock_config
SELECT config FROM pinlater_queue_config WHERE name = %(name)s FOR UPDATE

-- name: ctl_put_config
INSERT INTO pinlater_queue_config (name, config) VALUES (%(name)s, %(config)s)
ON DUPLICATE KEY UPDATE config = %(config)s

-- name: ctl_delete_config
DELETE FROM pinlater_queue_config WHERE name = %(name)s

-- name: ctl_delete_bucket
DELETE FROM pinlater_rate_bucket WHERE bucket = %(bucket)s

-- name: ctl_lock_buckets
-- Bucket rows are control rows, not jobs: locking them (in key order, so
-- two steps over the same buckets never deadlock) serializes every
-- acquirer of a bucket for the few statements of one refill-and-take.
SELECT bucket, tokens, ts, {now} FROM pinlater_rate_bucket WHERE bucket IN ({ids}) ORDER BY bucket FOR UPDATE

-- name: ctl_init_buckets
-- A missing bucket starts full; IGNORE: a concurrent acquirer may create it first.
INSERT IGNORE INTO pinlater_rate_bucket (bucket, tokens, ts) VALUES {rows}

-- name: ctl_init_buckets.row
(%s, %s, {now})

-- name: ctl_store_buckets
-- The rows are locked and exist: each is set, in one statement however many.
INSERT INTO pinlater_rate_bucket (bucket, tokens, ts) VALUES {rows}
ON DUPLICATE KEY UPDATE tokens = VALUES(tokens), ts = VALUES(ts)

-- name: ctl_store_buckets.row
(%s, %s, %s)

-- name: ctl_store_expiring_buckets
-- The same, on a store at layout 3 on: each bucket's expiry too.
INSERT INTO pinlater_rate_bucket (bucket, tokens, ts, expires_at) VALUES {rows}
ON DUPLICATE KEY UPDATE tokens = VALUES(tokens), ts = VALUES(ts), expires_at = VALUES(expires_at)

-- name: ctl_store_expiring_buckets.row
(%s, %s, %s, %s)

-- name: ctl_purge_buckets
-- Buckets idle long enough to be full again: dropped, since a missing
-- bucket starts full. A bounded step, as an acquire's aside.
DELETE FROM pinlater_rate_bucket WHERE expires_at > 0 AND expires_at <= {now} ORDER BY expires_at LIMIT 500

-- name: ctl_release
-- Tokens given back to existing buckets (a missing one counts as full),
-- never above the burst; one statement however many buckets.
UPDATE pinlater_rate_bucket AS b JOIN ({rows}) AS g ON b.bucket = g.bucket
SET b.tokens = LEAST(%s, b.tokens + g.n)

-- name: ctl_release.row
SELECT %s AS bucket, %s AS n

-- ---------------------------------------------------------------- concurrency slots

-- name: ctl_create_slots_table
-- A capped queue's slots, counted per owner (a process; its claims' tokens
-- start with its name), stamped with the server's clock when the owner
-- last synced (0: stale). The row of owner '#' holds the total: every
-- step locks it first, so a step is atomic across processes.
CREATE TABLE IF NOT EXISTS pinlater_slot_owners (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  owner VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  held BIGINT NOT NULL,
  synced_ms BIGINT NOT NULL,
  PRIMARY KEY (queue, owner)
) ENGINE=InnoDB

-- name: slot_total_init
INSERT IGNORE INTO pinlater_slot_owners (queue, owner, held, synced_ms) VALUES (%(queue)s, '#', 0, 0)

-- name: slot_lock
SELECT held, {now} FROM pinlater_slot_owners WHERE queue = %(queue)s AND owner = '#' FOR UPDATE

-- name: slot_held
SELECT owner, held, synced_ms FROM pinlater_slot_owners WHERE queue = %s AND owner IN ({ids})

-- name: slot_put
INSERT INTO pinlater_slot_owners (queue, owner, held, synced_ms) VALUES (%s, %s, %s, %s)
ON DUPLICATE KEY UPDATE held = VALUES(held), synced_ms = VALUES(synced_ms)

-- name: slot_forget
DELETE FROM pinlater_slot_owners WHERE queue = %s AND owner = %s

-- name: slot_owners
SELECT owner, held, synced_ms, {now} FROM pinlater_slot_owners WHERE queue = %(queue)s

-- name: slot_now
SELECT {now}

-- name: slot_drop
DELETE FROM pinlater_slot_owners WHERE queue = %(queue)s

-- ---------------------------------------------------------------- per-key slots

-- name: ctl_create_key_slots_table
-- The slots of a queue with a key_max_running, per owner (as
-- pinlater_slot_owners) and fairness key, kept only while above 0.
CREATE TABLE IF NOT EXISTS pinlater_key_slots (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  owner VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  fkey VARBINARY(64) NOT NULL,
  held BIGINT NOT NULL,
  PRIMARY KEY (queue, owner, fkey),
  KEY by_key (queue, fkey)
) ENGINE=InnoDB

-- name: ctl_create_key_owners_table
-- Each owner's stamp, the server's clock when it last synced (0: stale).
-- The row of owner '#' is the queue's lock: every step locks it first.
CREATE TABLE IF NOT EXISTS pinlater_key_owners (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  owner VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  synced_ms BIGINT NOT NULL,
  PRIMARY KEY (queue, owner)
) ENGINE=InnoDB

-- name: key_slot_lock_init
INSERT IGNORE INTO pinlater_key_owners (queue, owner, synced_ms) VALUES (%(queue)s, '#', 0)

-- name: key_slot_lock
SELECT {now} FROM pinlater_key_owners WHERE queue = %(queue)s AND owner = '#' FOR UPDATE

-- name: key_slot_free
UPDATE pinlater_key_slots SET held = held - LEAST(held, %s) WHERE queue = %s AND owner = %s AND fkey = %s

-- name: key_slot_totals
SELECT fkey, SUM(held) FROM pinlater_key_slots WHERE queue = %s AND fkey IN ({ids}) GROUP BY fkey

-- name: key_slot_add
INSERT INTO pinlater_key_slots (queue, owner, fkey, held) VALUES (%s, %s, %s, %s)
ON DUPLICATE KEY UPDATE held = held + VALUES(held)

-- name: key_slot_set
INSERT INTO pinlater_key_slots (queue, owner, fkey, held) VALUES (%s, %s, %s, %s)
ON DUPLICATE KEY UPDATE held = VALUES(held)

-- name: key_slot_sweep
DELETE FROM pinlater_key_slots WHERE queue = %(queue)s AND held <= 0

-- name: key_slot_stamp
INSERT INTO pinlater_key_owners (queue, owner, synced_ms) VALUES (%s, %s, %s)
ON DUPLICATE KEY UPDATE synced_ms = VALUES(synced_ms)

-- name: key_slot_stamps
SELECT owner, synced_ms FROM pinlater_key_owners WHERE queue = %(queue)s AND owner <> '#'

-- name: key_slot_held
SELECT owner, fkey, held FROM pinlater_key_slots WHERE queue = %(queue)s AND held > 0

-- name: key_slot_owner_holds
SELECT EXISTS (SELECT 1 FROM pinlater_key_slots WHERE queue = %s AND owner = %s AND held > 0)

-- name: key_slot_forget
DELETE FROM pinlater_key_owners WHERE queue = %s AND owner = %s

-- name: key_slot_drop
DELETE FROM pinlater_key_slots WHERE queue = %(queue)s

-- name: key_slot_drop_owners
DELETE FROM pinlater_key_owners WHERE queue = %(queue)s

-- ---------------------------------------------------------------- event counters

-- name: ctl_create_counts_table
CREATE TABLE IF NOT EXISTS pinlater_event_counts (
  minute BIGINT NOT NULL,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n BIGINT NOT NULL,
  PRIMARY KEY (minute, queue, event)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: ctl_add_counts
-- One statement for a whole flush: every process adds into the same rows.
INSERT INTO pinlater_event_counts (minute, queue, event, n) VALUES {rows}
ON DUPLICATE KEY UPDATE n = n + VALUES(n)

-- name: ctl_add_counts.row
(%s, %s, %s, %s)

-- name: ctl_read_counts
SELECT minute, queue, event, n FROM pinlater_event_counts WHERE minute >= %(since)s

-- name: ctl_purge_counts
DELETE FROM pinlater_event_counts WHERE minute < %(before)s LIMIT 10000

-- ---------------------------------------------------------------- idempotency keys

-- name: ctl_create_idempotency_table
CREATE TABLE IF NOT EXISTS pinlater_idempotency (
  k VARBINARY(1020) NOT NULL,
  descriptors MEDIUMTEXT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (k),
  KEY by_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: idem_delete_expired_key
DELETE FROM pinlater_idempotency WHERE k = %(k)s AND expires_at <= {now}

-- name: idem_reserve
-- INSERT IGNORE on the primary key: exactly one caller takes a free key.
INSERT IGNORE INTO pinlater_idempotency (k, descriptors, expires_at)
VALUES (%(k)s, NULL, {now} + %(ttl)s)

-- name: idem_remember
INSERT INTO pinlater_idempotency (k, descriptors, expires_at)
VALUES (%(k)s, %(d)s, {now} + %(ttl)s)
ON DUPLICATE KEY UPDATE descriptors = VALUES(descriptors), expires_at = VALUES(expires_at)

-- name: idem_recall
SELECT descriptors FROM pinlater_idempotency WHERE k = %(k)s AND expires_at > {now}

-- name: idem_forget
DELETE FROM pinlater_idempotency WHERE k = %(k)s

-- name: idem_purge
DELETE FROM pinlater_idempotency WHERE expires_at <= {now} LIMIT 1000

-- ---------------------------------------------------------------- batches
-- A batch (pinlater.stores.control.Batches) is a row of pinlater_batches;
-- its jobs are rows of pinlater_batch_jobs (outcome NULL while not ended,
-- then 'S' or 'F'), one per job, keyed by descriptor: a job is in one batch.
-- Every change locks the jobs' rows first, then the batches' rows (in id
-- order), so that two changes wait for each other rather than deadlock.

-- name: ctl_create_batches_table
CREATE TABLE IF NOT EXISTS pinlater_batches (
  id VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  doc TEXT NOT NULL,
  state VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  total BIGINT NOT NULL,
  ok BIGINT NOT NULL,
  failed BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  updated_ms BIGINT NOT NULL,
  PRIMARY KEY (id),
  KEY by_state (state, updated_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: ctl_create_batch_jobs_table
CREATE TABLE IF NOT EXISTS pinlater_batch_jobs (
  descriptor VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  batch VARCHAR(80) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  outcome CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NULL,
  PRIMARY KEY (descriptor),
  KEY by_batch (batch, descriptor)
) ENGINE=InnoDB

-- name: batch_create
-- A batch of an id already made is left as it is (0 rows).
INSERT IGNORE INTO pinlater_batches (id, doc, state, total, ok, failed, created_ms, updated_ms)
VALUES (%(id)s, %(doc)s, 'open', 0, 0, 0, {now}, {now})

-- name: batch_jobs_lock
SELECT descriptor, batch, outcome FROM pinlater_batch_jobs WHERE descriptor IN ({ids}) FOR UPDATE

-- name: batch_lock
SELECT id, state, total, ok, failed FROM pinlater_batches WHERE id IN ({ids}) ORDER BY id FOR UPDATE

-- name: batch_jobs_put
-- A job of another batch moves here, its end not known again.
INSERT INTO pinlater_batch_jobs (descriptor, batch, outcome) VALUES {rows}
ON DUPLICATE KEY UPDATE outcome = IF(batch = VALUES(batch), outcome, NULL), batch = VALUES(batch)

-- name: batch_jobs_put.row
(%s, %s, NULL)

-- name: batch_counts
-- A batch's counts moved by (total, ok, failed) and its state set.
UPDATE pinlater_batches
SET total = total + %s, ok = ok + %s, failed = failed + %s, state = %s, updated_ms = {now}
WHERE id = %s

-- name: batch_jobs_end
UPDATE pinlater_batch_jobs SET outcome = %s WHERE descriptor IN ({ids}) AND outcome IS NULL

-- name: batch_set_state
UPDATE pinlater_batches SET state = %s, updated_ms = {now} WHERE id = %s AND state IN ({ids})

-- name: batch_get
SELECT id, doc, state, total, ok, failed, created_ms, updated_ms FROM pinlater_batches WHERE id = %s

-- name: batch_jobs_page
SELECT descriptor, outcome FROM pinlater_batch_jobs FORCE INDEX (by_batch)
WHERE batch = %s AND descriptor > %s ORDER BY descriptor LIMIT %s

-- name: batch_list
-- One state a statement: a range of by_state (state, updated_ms, id) read
-- in order and stopped at the LIMIT; an IN list of states would read and
-- sort every idle batch of them. Past (%s, %s) in (updated_ms, id) order.
SELECT id, doc, state, total, ok, failed, created_ms, updated_ms FROM pinlater_batches FORCE INDEX (by_state)
WHERE state = %s AND updated_ms <= {now} - %s AND updated_ms >= %s AND (updated_ms > %s OR id > %s)
ORDER BY updated_ms, id LIMIT %s

-- name: batch_list_newest
SELECT id, doc, state, total, ok, failed, created_ms, updated_ms FROM pinlater_batches FORCE INDEX (by_state)
WHERE state = %s AND updated_ms <= {now} - %s ORDER BY updated_ms DESC, id DESC LIMIT %s

-- name: batch_drop_jobs
DELETE FROM pinlater_batch_jobs WHERE batch = %s LIMIT 10000

-- name: batch_drop
DELETE FROM pinlater_batches WHERE id = %s
