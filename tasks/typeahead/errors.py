"""Errors of the typeahead."""

from __future__ import annotations


class TypeaheadUnavailable(Exception):
    """The contacts index cannot answer now (no cluster reachable, a timeout):
    the endpoint answers 503 with this message, the CLI exits 2."""
