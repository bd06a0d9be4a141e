"""Benchmarks (``python bench/<script>.py``); a package so that mypy and
celery workers (``-A bench.celery_apps:...``) name its modules ``bench.*``."""
