"""The control store: queue configs and global rate-limit buckets, shared by
every process of a cluster."""

from pinlater.control.base import ControlStore

__all__ = ["ControlStore"]
