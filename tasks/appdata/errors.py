"""Errors of the app-data layer. They are not PinLater errors: a task that
hits one lets it propagate, and PinLater retries the job by its policy."""

from __future__ import annotations


class AppDataError(Exception):
    """Base of every app-data storage error."""


class AppDataUnavailable(AppDataError):
    """A shard's MySQL server could not be reached (or refused us). Nothing
    is known to have been written; retrying later is the remedy."""


class AppDataStorageError(AppDataError):
    """The server answered with an error; ``errno`` is MySQL's number."""

    def __init__(self, message: str, errno: int | None) -> None:
        super().__init__(message)
        self.errno = errno

    def __reduce__(self) -> tuple[type[AppDataStorageError], tuple[str, int | None]]:
        # Celery pool processes pickle a task's exception to its worker.
        return type(self), (str(self), self.errno)


# MySQL's errors for a database (1049) or table (1146) not made yet: a store
# that holds nothing yet, which a reader shows as empty rather than failing.
NOT_CREATED = frozenset({1049, 1146})


class UnknownShard(AppDataError, LookupError):
    """An id names a shard that the shard map does not place on any server."""
