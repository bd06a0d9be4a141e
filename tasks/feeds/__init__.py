"""Following feeds: the plain functions the feed tasks
call. Each takes the app-data store and/or the HBase pair and returns write
bodies (``tasks.feeds.writes.WriteBody``) that one job per cluster applies;
see docs/feeds.md."""
