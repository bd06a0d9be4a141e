-- The dashboard's own records in MySQL (dashboards/records.py): the audit
-- log and progress documents. Loaded with pinlater.kit.sqlblocks (blocks start
-- at "-- name: NAME"); every value is a driver parameter.

-- name: pld_create_log
CREATE TABLE IF NOT EXISTS pld_log (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  log VARCHAR(64) NOT NULL,
  doc MEDIUMTEXT NOT NULL,
  KEY log_id (log, id)
) ENGINE=InnoDB

-- name: pld_create_map
CREATE TABLE IF NOT EXISTS pld_map (
  tbl VARCHAR(64) NOT NULL,
  k VARCHAR(191) NOT NULL,
  doc MEDIUMTEXT NOT NULL,
  PRIMARY KEY (tbl, k)
) ENGINE=InnoDB

-- name: pld_append
INSERT INTO pld_log (log, doc) VALUES (%s, %s)

-- name: pld_recent
SELECT doc FROM pld_log WHERE log = %s ORDER BY id DESC LIMIT %s

-- name: pld_put
INSERT INTO pld_map (tbl, k, doc) VALUES (%s, %s, %s)
ON DUPLICATE KEY UPDATE doc = VALUES(doc)

-- name: pld_items
SELECT k, doc FROM pld_map WHERE tbl = %s

-- name: pld_remove
DELETE FROM pld_map WHERE tbl = %s AND k = %s
