"""Job logic run by the workers: app-data access (sharded MySQL), HBase
schemas and access, fan-out, follow/unfollow, feed trimming and reads, the
typeahead index, and bulk backfills (see ../shared/DESIGN.md, "HBase and the
tasks"). Here so far: ``tasks.hbase``, the HBase access every feed task uses."""
