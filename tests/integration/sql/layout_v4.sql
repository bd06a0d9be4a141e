-- Storage layout 4 of the MySQL shards, frozen: layout 3's tables
-- (layout_v3.sql) with the trace column on job tables, as PinLater made
-- them before job tables had a fairness key. The control store stayed at
-- layout 2. tests/integration/test_migrations.py builds an old store from
-- it. Do not change these blocks when the layout changes.

-- name: layout_v4_trace_column
ALTER TABLE {table} ADD COLUMN trace VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER claim

-- name: layout_v4_stamp
UPDATE pinlater_meta SET version = 4 WHERE name = 'shard'
