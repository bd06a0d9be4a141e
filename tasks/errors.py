"""Errors shared by the task packages."""

from __future__ import annotations


class TryLater(Exception):
    """A job ran before the truth it acts on is in place (an unfollow's job
    before the follow left MySQL, say): it fails and runs again later on its
    queue's retry policy, as after an outage."""
