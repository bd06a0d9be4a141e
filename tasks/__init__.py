"""Job logic run by the workers: app-data access (sharded MySQL), HBase
schemas and access, fan-out, follow/unfollow, feed trimming and reads, the
typeahead index, and bulk backfills. Nothing lives here yet: these tasks
arrive with the HBase issues (see ../shared/DESIGN.md, "HBase and the tasks")."""
