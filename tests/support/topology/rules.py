"""The nftables rules of the network faults, as text.

All of them live in one bridge-family table of the fabric namespace, whose
forward chain sees every frame between two hosts. The whole table is written
again for each change and loaded with one ``nft -f``, which applies a file
as one transaction: no moment with half a partition."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TABLE = "bridge pltopo"


def partition(a: str, others: Iterable[str] | None) -> list[str]:
    """Drop between ``a`` and ``others`` (every other host when None), both
    ways. A drop sends nothing back, so a connect times out."""
    if others is None:
        return [f"ip saddr {a} counter drop", f"ip daddr {a} counter drop"]
    peers = ", ".join(sorted(others))
    return [f"ip saddr {a} ip daddr {{ {peers} }} counter drop",
            f"ip saddr {{ {peers} }} ip daddr {a} counter drop"]


def blackhole(address: str, port: int | None) -> list[str]:
    """Drop everything to ``address``, or only TCP to ``port`` of it."""
    if port is None:
        return [f"ip daddr {address} counter drop"]
    return [f"ip daddr {address} tcp dport {port} counter drop"]


def loss(address: str, percent: int) -> list[str]:
    """Each packet to or from ``address`` dropped with probability
    ``percent``/100, each direction drawn on its own."""
    draw = f"numgen random mod 100 < {percent}"
    return [f"ip saddr {address} {draw} counter drop", f"ip daddr {address} {draw} counter drop"]


def ruleset(faults: Mapping[int, list[str]]) -> str:
    """The file that replaces the table with one holding ``faults``' rules
    (each tagged with its fault's number, to read its counters back). The
    table is declared before it is deleted, so the first load works too."""
    lines = [f"table {TABLE}", f"delete table {TABLE}", f"table {TABLE} {{", "  chain forward {",
             "    type filter hook forward priority 0; policy accept;"]
    for number, rules in sorted(faults.items()):
        lines += [f'    {rule} comment "fault-{number}"' for rule in rules]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"
