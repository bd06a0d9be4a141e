"""Bulk backfills (one command starts a backfill): chained, paged
jobs on the ``backfill`` queue, runs and pages recorded in app-data MySQL,
progress, pause/resume, and a verify pass that repairs what differs.

- ``kinds``: what a backfill of one kind does (the protocol and the registry)
- ``plan``, ``progress``: pages of a run and the progress math (pure)
- ``records``: runs and pages in MySQL (``sql/backfill.sql``)
- ``pages``: one page job as a plain function; ``tasks``: its Celery shell
- ``runs``: start, pause, resume, status; ``verify``: the verify rounds
- ``cli``: ``pinlater-backfill`` (the kinds are the apps': ``tasks.feeds.backfill_kind``...)
See docs/backfill.md.
"""
