"""The Celery side: Celery workers that take their jobs from PinLater.

* ``workers.app``       the Celery app (``celery -A workers.app worker``), broker ``pinlater://``
* ``workers.task``      ``PinLaterTask``: late ACKs, PinLater retries, heartbeats
* ``workers.transport`` the Kombu transport; ``workers.channel`` and ``workers.qos`` its parts
* ``workers.bus``       broadcast traffic (events, remote control, wake-ups) over Redis pub/sub
* ``workers.message_format`` how a Celery message is stored as a job body

See ``workers/README.md``.
"""
