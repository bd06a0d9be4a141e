"""Records kept for tools in the control store (same URL as the job
service's): a newest-first log of JSON documents and maps of JSON documents
by key. The dashboard keeps its audit log and the progress any process
publishes there; each kind of store implements them (``pinlater.stores``'s
``Records`` protocol), so a tool opens them without naming a kind.
"""

from __future__ import annotations

from pinlater.stores import open_control_store
from pinlater.stores.control import Doc, Records

__all__ = ["Doc", "Records", "open_records"]


def open_records(url: str, socket_timeout_s: float = 5.0) -> Records:
    """The records of the control store at ``url`` (ValueError for a URL of
    no known kind)."""
    return open_control_store(url, socket_timeout_s)
