"""Hosts as network namespaces on this one machine, and real network faults
between them: partitions, black holes, loss, bandwidth caps, paused hosts,
and a relay for delay, jitter, stalls and resets (docs/testing.md,
"Network faults between hosts")."""

from tests.support.topology.commands import TopologyError
from tests.support.topology.echo import start_echo
from tests.support.topology.relay import Relay
from tests.support.topology.topology import Fault, Topology

__all__ = ["Fault", "Relay", "Topology", "TopologyError", "start_echo"]
