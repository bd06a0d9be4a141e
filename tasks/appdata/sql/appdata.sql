-- Every statement of the app-data layer (tasks/appdata). Parsed once by
-- tasks/appdata/sql.py: a block starts at a line "-- name: NAME" and runs to
-- the next one; comment lines are dropped.
--
-- Placeholders the loader fills (never with caller input):
--   {database}  a shard database <prefix>s<NNNNN>, checked against a strict regex
--   {table}     one of the fixed object or mapping table names (a whitelist)
--   {ids}       n positional %s markers for an IN (...) list
--   {rows}      n VALUES tuples "(%s, ...)", each as wide as the INSERT's column list
-- Every value is a %s parameter. Statements name their database
-- (db.table): one connection per server serves all of its shard databases,
-- and no statement ever touches two databases (joins happen in Python).

-- ---------------------------------------------------------------- session

-- name: session_isolation
-- READ COMMITTED: no gap locks between concurrent follows of one user.
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED

-- name: session_setup
SET SESSION time_zone = '+00:00'

-- name: autoinc_mode
-- Multi-row INSERTs get consecutive auto-increment ids unless the lock mode
-- is 2 ("interleaved") or the increment is not 1.
SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment

-- ---------------------------------------------------------------- schema

-- name: create_database
CREATE DATABASE IF NOT EXISTS {database} CHARACTER SET utf8mb4

-- name: drop_database
DROP DATABASE IF EXISTS {database}

-- name: create_object_table
-- An object: local_id is the low 36 bits of its 64-bit id; data is a JSON
-- object (the application's fields); created_at is ms since the epoch, UTC
-- (a pin's feed column is reverse created_at + pin id).
CREATE TABLE IF NOT EXISTS {database}.{table} (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  created_at BIGINT NOT NULL,
  data MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (local_id)
) ENGINE=InnoDB

-- name: create_mapping_table
-- A one-directional mapping, on the shard of from_id. The primary key makes
-- a pair unique (a follow exists once) and answers "exists"; by_sequence
-- serves the newest-first pages (InnoDB appends the primary key to it, so
-- it covers every page query).
CREATE TABLE IF NOT EXISTS {database}.{table} (
  from_id BIGINT UNSIGNED NOT NULL,
  to_id BIGINT UNSIGNED NOT NULL,
  sequence BIGINT NOT NULL,
  PRIMARY KEY (from_id, to_id),
  KEY by_sequence (from_id, sequence, to_id)
) ENGINE=InnoDB

-- ---------------------------------------------------------------- objects

-- name: insert_object
INSERT INTO {database}.{table} (created_at, data) VALUES (%s, %s)

-- name: insert_objects
-- Multi-row: {rows} is n "(%s, %s)" tuples. LAST_INSERT_ID() is the first
-- row's id; the rest follow it (lock mode 0 or 1, increment 1).
INSERT INTO {database}.{table} (created_at, data) VALUES {rows}

-- name: get_objects
-- The first columns are the shard and type, so that one server can answer
-- for several of its databases and tables in one round trip (these SELECTs
-- joined by UNION ALL). Args: shard, type, then the local ids.
SELECT %s AS shard, %s AS type, local_id, created_at, data FROM {database}.{table} WHERE local_id IN ({ids})

-- name: get_objects_packed
-- The same rows packed (see ``packed`` in sql.py): one row per IN list, its
-- number, how many rows matched, and those rows as one JSON array of
-- [local_id, created_at, data]. Joined by UNION ALL like get_objects.
-- The array is in local_id order, so that reading the same rows twice gives
-- the same text (and get_objects_digest its digest).
-- Args: the IN list's number, then the local ids.
SELECT %s AS piece, COUNT(*) AS found, JSON_ARRAYAGG(JSON_ARRAY(local_id, created_at, JSON_EXTRACT(data, '$')) ORDER BY local_id) AS packed FROM {database}.{table} WHERE local_id IN ({ids})

-- name: get_objects_digest
-- get_objects_packed's count and the SHA-256 of its text instead of the
-- text: a re-read that says whether the rows are still those read, sending
-- 64 characters for each IN list.
SELECT %s AS piece, COUNT(*) AS found, SHA2(JSON_ARRAYAGG(JSON_ARRAY(local_id, created_at, JSON_EXTRACT(data, '$')) ORDER BY local_id), 256) AS digest FROM {database}.{table} WHERE local_id IN ({ids})

-- name: max_local_id
-- The highest local id handed out on this shard so far (0: none): a bulk
-- backfill pages a shard's objects from 1 to it.
SELECT COALESCE(MAX(local_id), 0) FROM {database}.{table}

-- name: local_ids_in_range
-- The local ids of one page of a shard's objects, ascending (the primary
-- key's range). Args: first, last (inclusive).
SELECT local_id FROM {database}.{table} WHERE local_id BETWEEN %s AND %s ORDER BY local_id

-- ---------------------------------------------------------------- mappings

-- name: map_add
-- An existing pair keeps its sequence: adding twice changes nothing (so a
-- retried write is harmless and a page walk never sees the pair move).
-- Row count: 1 when added, 0 when it was there.
INSERT INTO {database}.{table} (from_id, to_id, sequence) VALUES (%s, %s, %s)
ON DUPLICATE KEY UPDATE to_id = to_id

-- name: map_add_many
-- map_add with {rows} "(%s, %s, %s)" tuples. Row count: the rows added.
INSERT INTO {database}.{table} (from_id, to_id, sequence) VALUES {rows}
ON DUPLICATE KEY UPDATE to_id = to_id

-- name: map_remove
DELETE FROM {database}.{table} WHERE from_id = %s AND to_id = %s

-- name: map_exists
SELECT 1 FROM {database}.{table} WHERE from_id = %s AND to_id = %s

-- name: map_count
SELECT COUNT(*) FROM {database}.{table} WHERE from_id = %s

-- name: map_first_page
-- Newest first: by sequence, ties by to_id, both descending.
SELECT to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
WHERE from_id = %s
ORDER BY sequence DESC, to_id DESC LIMIT %s

-- name: map_next_page
-- Keyset paging: strictly after the cursor's (sequence, to_id) in the
-- newest-first order. Args: from_id, sequence, sequence, to_id, limit.
SELECT to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
WHERE from_id = %s AND (sequence < %s OR (sequence = %s AND to_id < %s))
ORDER BY sequence DESC, to_id DESC LIMIT %s

-- name: map_first_page_packed
-- map_first_page packed (see ``packed`` in sql.py): how many rows, and
-- "to_id sequence to_id sequence ..." in the page's order. Args: from_id, limit.
SELECT COUNT(*) AS found, GROUP_CONCAT(to_id, ' ', sequence ORDER BY sequence DESC, to_id DESC SEPARATOR ' ') AS packed
FROM (SELECT to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
      WHERE from_id = %s
      ORDER BY sequence DESC, to_id DESC LIMIT %s) AS page

-- name: map_next_page_packed
-- map_next_page packed. Args: from_id, sequence, sequence, to_id, limit.
SELECT COUNT(*) AS found, GROUP_CONCAT(to_id, ' ', sequence ORDER BY sequence DESC, to_id DESC SEPARATOR ' ') AS packed
FROM (SELECT to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
      WHERE from_id = %s AND (sequence < %s OR (sequence = %s AND to_id < %s))
      ORDER BY sequence DESC, to_id DESC LIMIT %s) AS page

-- name: map_having_rows
-- Which of these from_ids (of one shard) have any row: one index probe each.
SELECT DISTINCT from_id FROM {database}.{table} WHERE from_id IN ({ids})

-- name: map_newest_part
-- One from_id's newest rows, at most a limit (an index range read that
-- stops there, however many rows the id has). Parenthesized: mappings.py
-- joins one per from_id with UNION ALL. Args: from_id, limit.
(SELECT from_id, to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
WHERE from_id = %s ORDER BY sequence DESC, to_id DESC LIMIT %s)

-- name: map_sequences
-- The sequence (follow time) of each of these to_ids mapped from from_id.
SELECT to_id, sequence FROM {database}.{table} WHERE from_id = %s AND to_id IN ({ids})

-- name: map_sequences_to
-- The sequence of the row from each of these from_ids to one to_id (point
-- lookups of the primary key). Args: to_id, then the from_ids.
SELECT from_id, sequence FROM {database}.{table} WHERE to_id = %s AND from_id IN ({ids})

-- name: map_count_sequences_to
-- How many of these (from_id, sequence) rows to one to_id exist (from_ids
-- of one shard, no pair twice; a point lookup of the primary key each,
-- nothing returned but the count). Args: the pairs as one JSON array of
-- [from_id, sequence], then to_id. JSON_TABLE reads integers exactly, to
-- 2^64 - 1.
SELECT COUNT(*)
FROM JSON_TABLE(%s, '$[*]' COLUMNS (from_id BIGINT UNSIGNED PATH '$[0]', sequence BIGINT PATH '$[1]')) AS wanted
JOIN {database}.{table} AS m ON m.from_id = wanted.from_id AND m.to_id = %s AND m.sequence = wanted.sequence

-- name: map_sequences_of_pairs
-- The sequence of each (from_id, to_id) row that exists among these pairs
-- (from_ids of one shard). Args: from_id, to_id of each pair.
SELECT from_id, to_id, sequence FROM {database}.{table} WHERE (from_id, to_id) IN ({pairs})

-- name: map_newer
-- The rows just newer than a (sequence, to_id), oldest first.
-- Args: from_id, sequence, sequence, to_id, limit.
SELECT to_id, sequence FROM {database}.{table} FORCE INDEX (by_sequence)
WHERE from_id = %s AND (sequence > %s OR (sequence = %s AND to_id > %s))
ORDER BY sequence ASC, to_id ASC LIMIT %s

-- ---------------------------------------------------------------- follow clocks

-- name: create_follow_clocks_table
-- Each user's clock (ms), on the user's shard: the time of their last follow,
-- unfollow or rename. Their next one gets a time past it (tasks.appdata.graph),
-- so no two follows of one user share a time, across both follow tables and
-- edges since removed (a follow's time versions its cells in the user's
-- feed), and a follow or rename is later than every action before it of
-- the users whose index entries it changes.
CREATE TABLE IF NOT EXISTS {database}.{table} (
  user_id BIGINT UNSIGNED NOT NULL,
  last_ms BIGINT NOT NULL,
  PRIMARY KEY (user_id)
) ENGINE=InnoDB

-- name: follow_clock_of
-- A user's clock as it is (no row: none yet).
SELECT last_ms FROM {database}.{table} WHERE user_id = %s

-- name: tick_follow_clock
-- The time asked for, or just past the user's last one when that is not
-- earlier. LAST_INSERT_ID(expr) hands the new value back in the OK packet
-- of an update (row count 2); a first insert (row count 1) keeps the time
-- asked for. Args: user_id, time asked for.
INSERT INTO {database}.{table} (user_id, last_ms) VALUES (%s, %s)
ON DUPLICATE KEY UPDATE last_ms = LAST_INSERT_ID(GREATEST(last_ms + 1, VALUES(last_ms)))

-- ---------------------------------------------------------------- object updates

-- name: get_object_data
SELECT created_at, data FROM {database}.{table} WHERE local_id = %s

-- name: replace_object_data
-- Compare-and-set on the whole blob: a concurrent update of the same
-- object makes this match no row (row count 0) and the caller reads again.
UPDATE {database}.{table} SET data = %s WHERE local_id = %s AND data = %s

-- ---------------------------------------------------------------- contacts

-- name: create_contact_sources_table
-- A user's imported contacts of one external source (an address book, a
-- social network): the whole list as JSON, replaced by every import.
-- updated_at (ms) is the import's time: the cell timestamp of its index
-- writes, so an earlier import never hides a later one.
CREATE TABLE IF NOT EXISTS {database}.{table} (
  user_id BIGINT UNSIGNED NOT NULL,
  source VARCHAR(32) CHARACTER SET ascii NOT NULL,
  updated_at BIGINT NOT NULL,
  data MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (user_id, source)
) ENGINE=InnoDB

-- name: put_contact_source
-- The later import wins: its time is the one asked for, or just past the
-- stored one's when that is not earlier (the row is its own clock, moved
-- under the row lock), so two imports in one millisecond get two times, in
-- the order they were made. LAST_INSERT_ID(expr) hands an update's time
-- back in its OK packet (row count 2); a first insert (row count 1) keeps
-- the time asked for. Args: user_id, source, time asked for, data.
INSERT INTO {database}.{table} (user_id, source, updated_at, data) VALUES (%s, %s, %s, %s)
ON DUPLICATE KEY UPDATE
  updated_at = LAST_INSERT_ID(GREATEST(updated_at + 1, VALUES(updated_at))),
  data = VALUES(data)

-- name: contact_sources_of_users
SELECT user_id, source, updated_at, data FROM {database}.{table} WHERE user_id IN ({ids})

-- name: contact_sources_page
-- A shard's imports after (user_id, source), in that order.
-- Args: user_id, user_id, source, limit.
SELECT user_id, source, updated_at, data FROM {database}.{table}
WHERE user_id > %s OR (user_id = %s AND source > %s)
ORDER BY user_id, source LIMIT %s

-- name: create_external_accounts_table
-- External account -> Pinterest user ("email:ann@example.com",
-- "social:12345"), on the shard its name hashes to (tasks.appdata.contacts).
CREATE TABLE IF NOT EXISTS {database}.{table} (
  account VARBINARY(255) NOT NULL,
  user_id BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (account)
) ENGINE=InnoDB

-- name: link_account
INSERT INTO {database}.{table} (account, user_id) VALUES (%s, %s)
ON DUPLICATE KEY UPDATE user_id = VALUES(user_id)

-- name: resolve_accounts
SELECT account, user_id FROM {database}.{table} WHERE account IN ({ids})

-- name: unlink_account
DELETE FROM {database}.{table} WHERE account = %s

-- name: create_account_importers_table
-- Who imported a contact naming an account: (account, importer, source),
-- on the account's shard, so a link or unlink of the account finds the
-- imports whose index entries it changes. Written before the import is
-- stored, never removed by a later import (a row whose import no longer
-- names the account costs the fix-up one read of that import).
CREATE TABLE IF NOT EXISTS {database}.{table} (
  account VARBINARY(255) NOT NULL,
  user_id BIGINT UNSIGNED NOT NULL,
  source VARCHAR(32) CHARACTER SET ascii NOT NULL,
  PRIMARY KEY (account, user_id, source)
) ENGINE=InnoDB

-- name: note_importers
-- Args: account, user_id, source for each row.
INSERT IGNORE INTO {database}.{table} (account, user_id, source) VALUES {rows}

-- name: importers_page
-- The importers of one account after (user_id, source), in that order.
-- Args: account, user_id, user_id, source, limit.
SELECT user_id, source FROM {database}.{table}
WHERE account = %s AND (user_id > %s OR (user_id = %s AND source > %s))
ORDER BY user_id, source LIMIT %s

-- name: map_rows_from_many
-- Every row of several from_ids of one shard (a backfill or verify page).
SELECT from_id, to_id, sequence FROM {database}.{table} WHERE from_id IN ({ids}) ORDER BY from_id, to_id

-- name: map_rows_from_many_packed
-- The same rows packed (see ``packed`` in sql.py): per from_id, how many
-- rows, and "to_id sequence to_id sequence ..." in to_id order (without an
-- order the plan decides it, and two reads of the same rows could differ).
SELECT from_id, COUNT(*) AS found, GROUP_CONCAT(to_id, ' ', sequence ORDER BY to_id SEPARATOR ' ') AS packed FROM {database}.{table} WHERE from_id IN ({ids}) GROUP BY from_id

-- name: map_digests_from_many
-- map_rows_from_many_packed's count and the SHA-256 of its text, per
-- from_id: whether the rows are still those read.
SELECT from_id, COUNT(*) AS found, SHA2(GROUP_CONCAT(to_id, ' ', sequence ORDER BY to_id SEPARATOR ' '), 256) AS digest FROM {database}.{table} WHERE from_id IN ({ids}) GROUP BY from_id
