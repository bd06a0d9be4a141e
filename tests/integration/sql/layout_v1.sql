-- Storage layout 1 of the MySQL stores, frozen: what PinLater wrote before
-- stores recorded their layout (tests/integration/test_migrate.py builds an
-- old store from it). Do not change these blocks when the layout changes.

-- name: layout_v1_queues
CREATE TABLE queues (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  priorities INT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB

-- name: layout_v1_job_table
CREATE TABLE {table} (
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
  PRIMARY KEY (id),
  KEY by_run_after (state, run_after, id),
  KEY by_updated_at (state, updated_at, id),
  KEY by_claim (claim)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: layout_v1_register_queue
INSERT INTO queues (name, priorities) VALUES (%(name)s, %(priorities)s)

-- name: layout_v1_insert_job
INSERT INTO {table} (id, state, body, attempts_allowed, attempts_remaining, custom_status,
                     created_at, run_after, updated_at, claim)
VALUES (%(id)s, %(state)s, %(body)s, %(allowed)s, %(remaining)s, '', %(at)s, %(at)s, %(at)s, %(claim)s)

-- name: layout_v1_ctl_config_table
CREATE TABLE pinlater_queue_config (
  name VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  config MEDIUMTEXT NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: layout_v1_ctl_bucket_table
CREATE TABLE pinlater_rate_bucket (
  bucket VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
  tokens DOUBLE NOT NULL,
  ts BIGINT NOT NULL,
  PRIMARY KEY (bucket)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: layout_v1_ctl_counts_table
CREATE TABLE pinlater_event_counts (
  minute BIGINT NOT NULL,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  event VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  n BIGINT NOT NULL,
  PRIMARY KEY (minute, queue, event)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: layout_v1_ctl_idempotency_table
CREATE TABLE pinlater_idempotency (
  k VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,
  descriptors MEDIUMTEXT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (k),
  KEY by_expiry (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: layout_v1_ctl_put_config
INSERT INTO pinlater_queue_config (name, config) VALUES (%(name)s, %(config)s)

-- name: test_add_index
-- A step of a test-only layout (an index on every job table).
ALTER TABLE {table} ADD INDEX test_by_created (created_at)
