"""Job logic run by the workers: app-data access (sharded MySQL), HBase
schemas and access, fan-out, follow/unfollow, feed trimming and reads, the
typeahead index, and bulk backfills. Each package's docstring says what it
holds; docs/feeds.md, docs/typeahead.md and docs/hbase.md describe them."""
