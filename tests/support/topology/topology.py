"""Hosts on one machine: a network namespace each, joined by veth pairs to a
bridge in a fabric namespace, addressed in 10.77.0.0/24. The root namespace
is never changed: its routes, addresses and firewall stay as they were, and
every interface lives and dies with one of the topology's namespaces."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.topology import rules
from tests.support.topology.commands import TopologyError, preflight, run
from tests.support.topology.freezer import HostFreezer, freezer_usable
from tests.support.topology.netns import socket_in
from tests.support.topology.reap import CPU_ROOT, FREEZER_ROOT, reap_orphans, reap_run, run_name
from tests.support.topology.relay import Relay

REPO = Path(__file__).resolve().parents[3]
HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")  # "v-" + name fits an interface name (15)
SUBNET = "10.77.0"
STOP_WAIT_S = 5.0
_sequence = itertools.count()


@dataclass
class Fault:
    """One applied fault; ``undo()`` (or leaving its ``with`` block) reverts
    it, once, whatever else is still applied."""

    description: str
    revert: Callable[[], None] = field(repr=False)
    active: bool = True
    number: int = 0  # an nftables fault's tag in the fabric's table; 0 for the others

    def undo(self) -> None:
        if self.active:
            self.active = False
            self.revert()

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *_: object) -> None:
        self.undo()


class Topology:
    """Named hosts that reach one another over a bridge, and the faults
    between them. ``with Topology(["w1", "srv1"]) as t:`` removes every
    namespace, process and cgroup on exit; if the owning process dies
    without closing it, its janitor removes them at once, and the next
    Topology built on the machine removes whatever a dead owner left."""

    def __init__(self, hosts: Sequence[str], *, use_freezer: bool | None = None,
                 cpu: Mapping[str, float] | None = None) -> None:
        """``cpu``: hosts given a share of the machine's cores (0.25: a
        quarter of one), a slow host or a small one, for every process
        spawned in it."""
        preflight()
        names = list(hosts)
        bad = [name for name in names if not HOST_NAME.match(name) or name == "fabric"]
        if bad or len(set(names)) != len(names) or not 0 < len(names) < 250:
            raise TopologyError(f"host names must be unique, [a-z][a-z0-9]{{0,11}}, not 'fabric': {names}")
        reap_orphans()
        self.run = run_name(next(_sequence))
        self.hosts = tuple(names)
        self.fabric = f"{self.run}-fabric"
        self._addresses = {name: f"{SUBNET}.{index + 1}" for index, name in enumerate(names)}
        self._nft_faults: dict[int, list[str]] = {}
        self._faults: list[Fault] = []
        self._fault_numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._relays: list[Relay] = []
        self._processes: list[subprocess.Popen[Any]] = []
        self._closed = False
        self._cpu: dict[str, Path] = {}
        # Started first, so no moment exists where a SIGKILL leaves something
        # behind that nobody will reap before the next topology.
        self._janitor = subprocess.Popen([sys.executable, "-m", "tests.support.topology.janitor", self.run],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=REPO,
                                         start_new_session=True)
        try:
            cgroups = freezer_usable() if use_freezer is None else use_freezer
            if cgroups and not freezer_usable():
                raise TopologyError(f"no writable cgroup v1 freezer at {FREEZER_ROOT}: pass use_freezer=False")
            self._freezers = {name: HostFreezer(self.namespace(name), cgroups) for name in names}
            for name, cores in (cpu or {}).items():
                self._limit_cpu(name, cores)
            self._build()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ building

    @property
    def janitor_pid(self) -> int:
        return self._janitor.pid

    def namespace(self, host: str) -> str:
        self._check(host)
        return f"{self.run}-{host}"

    def address(self, host: str) -> str:
        self._check(host)
        return self._addresses[host]

    def _check(self, host: str) -> None:
        if host not in self.hosts:
            raise TopologyError(f"no host {host!r} in this topology (hosts: {', '.join(self.hosts)})")

    def _limit_cpu(self, host: str, cores: float) -> None:
        self._check(host)
        if not 0.01 <= cores <= (os.cpu_count() or 1):
            raise TopologyError(f"cpu for {host}: {cores} is not between 0.01 and the machine's {os.cpu_count()} cores")
        if not os.access(CPU_ROOT, os.W_OK):
            raise TopologyError(f"no writable cgroup v1 cpu controller at {CPU_ROOT}: a host's cores cannot be limited")
        cgroup = CPU_ROOT / self.namespace(host)
        cgroup.mkdir(exist_ok=True)
        period_us = 100_000
        (cgroup / "cpu.cfs_period_us").write_text(str(period_us))
        (cgroup / "cpu.cfs_quota_us").write_text(str(round(cores * period_us)))
        self._cpu[host] = cgroup

    def _build(self) -> None:
        namespaces = [self.fabric, *(self.namespace(host) for host in self.hosts)]
        run(["ip", "-batch", "-"], stdin="".join(f"netns add {name}\n" for name in namespaces))
        fabric = ["link add br0 type bridge", "link set br0 up", "link set lo up"]
        for host in self.hosts:
            fabric += [f"link add v-{host} type veth peer name eth0 netns {self.namespace(host)}",
                       f"link set v-{host} master br0", f"link set v-{host} up"]
        run(["ip", "-n", self.fabric, "-batch", "-"], stdin="\n".join(fabric) + "\n")
        for host in self.hosts:
            commands = ["link set lo up", f"addr add {self.address(host)}/24 dev eth0", "link set eth0 up"]
            run(["ip", "-n", self.namespace(host), "-batch", "-"], stdin="\n".join(commands) + "\n")
        self._apply_nft()

    # ------------------------------------------------------------ processes

    def spawn(self, host: str, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """``argv`` started inside ``host`` (in a session of its own unless
        ``start_new_session`` says otherwise); close() stops it."""
        self._check(host)
        freezer = self._freezers[host]
        command = ["ip", "netns", "exec", self.namespace(host), *argv]
        # Joins its cgroups before exec, so nothing it runs escapes a quota or
        # a pause (the freezer's last: spawn returns once it is in that one);
        # a shell rather than preexec_fn, which is unsafe beside threads.
        cgroups = [group / "cgroup.procs" for group in (self._cpu.get(host), freezer.cgroup) if group is not None]
        if cgroups:
            command = ["sh", "-c", 'IFS=:; for f in $0; do echo $$ > "$f" || exit 125; done; exec "$@"',
                       ":".join(map(str, cgroups)), *command]
        popen_kwargs.setdefault("start_new_session", True)
        process: subprocess.Popen[Any] = subprocess.Popen(command, **popen_kwargs)
        freezer.track(process)
        self._processes.append(process)
        return process

    def new_socket(self, host: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of ``host``'s namespace, usable from any thread here."""
        return socket_in(self.namespace(host), family, kind)

    def connect(self, host: str, address: tuple[str, int], timeout_s: float = 2.0) -> socket.socket:
        """A TCP connection from ``host`` to ``address``; raises TimeoutError
        (or the OSError of a refusal) as a plain socket would."""
        sock = self.new_socket(host)
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock

    def relay(self, host: str, target: tuple[str, int], port: int = 0, **settings: Any) -> Relay:
        """A ``Relay`` listening on ``host``'s address (and connecting out
        from ``host``) to ``target``; closed with the topology."""
        relay = Relay(target, listen=(self.address(host), port), netns=self.namespace(host), **settings)
        self._relays.append(relay)
        return relay

    # ------------------------------------------------------------ faults

    def _apply_nft(self) -> None:
        run(["ip", "netns", "exec", self.fabric, "nft", "-f", "-"], stdin=rules.ruleset(self._nft_faults))

    def _nft_fault(self, description: str, fault_rules: list[str]) -> Fault:
        with self._lock:
            number = next(self._fault_numbers)
            self._nft_faults[number] = fault_rules
            try:
                self._apply_nft()
            except TopologyError:
                del self._nft_faults[number]
                raise

        def revert() -> None:
            with self._lock:
                if self._nft_faults.pop(number, None) is not None and not self._closed:
                    self._apply_nft()

        return self._record(Fault(description, revert, number=number))

    def _record(self, fault: Fault) -> Fault:
        self._faults.append(fault)
        return fault

    def partition(self, a: str, others: Iterable[str] | None = None) -> Fault:
        """Silently drops all traffic between ``a`` and ``others`` (every
        other host when None), both ways."""
        listed = None if others is None else [host for host in others if host != a]
        if listed == []:
            raise TopologyError(f"partition of {a} from no other host: name some, or None for all")
        peers = None if listed is None else [self.address(host) for host in listed]
        named = "all" if listed is None else ",".join(sorted(listed))
        return self._nft_fault(f"partition {a} | {named}", rules.partition(self.address(a), peers))

    def blackhole(self, host: str, port: int | None = None) -> Fault:
        """Silently drops everything to ``host``, or TCP to ``port`` on it."""
        where = host if port is None else f"{host}:{port}"
        return self._nft_fault(f"blackhole {where}", rules.blackhole(self.address(host), port))

    def loss(self, host: str, percent: int) -> Fault:
        """Drops each packet to or from ``host`` with probability
        ``percent``/100."""
        if not 0 <= percent <= 100:
            raise TopologyError(f"loss is a percentage, 0 to 100, not {percent}")
        return self._nft_fault(f"loss {host} {percent}%", rules.loss(self.address(host), percent))

    def bandwidth(self, host: str, rate: int) -> Fault:
        """Caps ``host``'s link at ``rate`` bits per second each way: a tbf
        qdisc on both ends of its veth (the fabric's end shapes what goes
        to the host, the host's end what leaves it)."""
        if rate < 8000:
            raise TopologyError(f"bandwidth rate is in bits per second, at least 8000, not {rate}")
        # A burst of 20 ms of traffic (at least a few full frames), and up to
        # 100 ms queued before tbf drops: a slow link, not a lossy one.
        burst = max(rate // 8 // 50, 16 * 1024)
        ends = [(self.fabric, f"v-{host}"), (self.namespace(host), "eth0")]
        for namespace, device in ends:
            run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{rate}bit",
                 "burst", str(burst), "latency", "100ms"])

        def revert() -> None:
            if not self._closed:
                for namespace, device in ends:
                    run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"], check=False)

        return self._record(Fault(f"bandwidth {host} {rate} bit/s", revert))

    def pause(self, host: str) -> Fault:
        """Freezes every process spawned in ``host`` (and their children):
        they neither answer nor die until ``resume`` or the fault's undo."""
        self._check(host)
        freezer = self._freezers[host]
        freezer.pause()
        return self._record(Fault(f"pause {host}", freezer.resume))

    def resume(self, host: str) -> None:
        for fault in self._faults:
            if fault.active and fault.description == f"pause {host}":
                fault.undo()

    @property
    def faults(self) -> list[Fault]:
        """The faults applied and not undone, oldest first."""
        return [fault for fault in self._faults if fault.active]

    def heal(self) -> None:
        """Undoes every fault, newest first."""
        for fault in reversed(self.faults):
            fault.undo()

    def nft_table(self) -> str:
        """The fault table with its drop counters, for a failing test's message."""
        return run(["ip", "netns", "exec", self.fabric, "nft", "list", "table", rules.TABLE]).stdout

    def dropped(self, fault: Fault) -> int:
        """Packets the rules of ``fault`` (a partition, black hole or loss)
        have dropped so far."""
        counted = re.finditer(rf'counter packets (\d+) bytes \d+ drop comment "fault-{fault.number}"', self.nft_table())
        return sum(int(match.group(1)) for match in counted)

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Stops every relay and process, then removes the namespaces (their
        veths go with them) and cgroups. Safe to call twice."""
        if self._closed:
            return
        for relay in self._relays:
            relay.close()
        for freezer in getattr(self, "_freezers", {}).values():
            if freezer.paused:
                freezer.resume()
        for process in self._processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    process.kill()
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_WAIT_S)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
        self._closed = True
        stuck = reap_run(self.run)
        if self._janitor.stdin is not None:
            self._janitor.stdin.close()  # the janitor finds nothing left, and exits
        try:
            self._janitor.wait(STOP_WAIT_S * 2)
        except subprocess.TimeoutExpired:
            self._janitor.kill()
            self._janitor.wait(STOP_WAIT_S)
        if stuck:
            raise TopologyError(f"could not remove {', '.join(stuck)}")

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
