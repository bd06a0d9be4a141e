"""The topology harness against real namespaces: hosts reach one another, and
each fault does what it says, measured. Traffic goes only between the
namespaces these tests make (10.77.0.0/24), never out of the machine."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.topology import Topology, TopologyError, start_echo
from tests.support.topology import commands as topology_commands
from tests.support.topology.reap import CPU_ROOT, FREEZER_ROOT, cgroup_pids, our_cgroups, our_namespaces, reap_run
from tests.support.waits import wait_for

REPO = Path(__file__).resolve().parents[2]
PORT, OTHER_PORT, CLOSED_PORT = 7000, 7001, 7999
# Long enough that a reply on a healthy link (well under 1 ms here) is never
# mistaken for a timeout, short enough to keep the file quick.
SILENCE_S = 0.5


@pytest.fixture(scope="module")
def topo() -> Iterator[Topology]:
    with Topology(["w1", "w2", "srv1", "srv2", "rl"]) as topology:
        servers = [start_echo(topology, "srv1", PORT), start_echo(topology, "srv1", OTHER_PORT),
                   start_echo(topology, "srv2", PORT)]
        yield topology
    # Closed: nothing of it is left, and every process it started has exited.
    assert leftovers(topology.run) == []
    assert all(server.returncode is not None for server in servers)


@pytest.fixture(autouse=True)
def healed(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "topo" in request.fixturenames:
        topology: Topology = request.getfixturevalue("topo")
        topology.heal()
        assert topology.faults == []


def at(topo: Topology, host: str, port: int = PORT) -> tuple[str, int]:
    return (topo.address(host), port)


def roundtrip(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def reaches(topo: Topology, src: str, dst: tuple[str, int]) -> bool:
    with topo.connect(src, dst, timeout_s=SILENCE_S) as sock:
        return roundtrip(sock) == b"ping"


def times_out(topo: Topology, src: str, dst: tuple[str, int]) -> float:
    """Seconds until a connect from ``src`` to ``dst`` gave up; fails if it
    was answered, refused or not."""
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        topo.connect(src, dst, timeout_s=SILENCE_S).close()
    return time.monotonic() - started


def udp_delivered(topo: Topology, src: str, dst: tuple[str, int], count: int = 1500, batch: int = 50) -> float:
    """The share of ``count`` UDP datagrams echoed back, sent ``batch`` at a
    time so that no socket buffer drops any."""
    received: set[int] = set()
    with topo.new_socket(src, socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.05)
        for start in range(0, count, batch):
            for seq in range(start, min(start + batch, count)):
                sock.sendto(seq.to_bytes(4, "big"), dst)
            while True:
                try:
                    received.add(int.from_bytes(sock.recv(64), "big"))
                except TimeoutError:
                    break
    return len(received) / count


def echo_transfer_s(topo: Topology, src: str, dst: tuple[str, int], size: int) -> float:
    """Seconds to send ``size`` bytes through an echo server and read them
    all back, sending and reading at once."""
    payload = os.urandom(size)
    with topo.connect(src, dst, timeout_s=20) as sock:
        started = time.monotonic()
        sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
        sender.start()
        got = 0
        while got < size and (chunk := sock.recv(65536)):
            got += len(chunk)
        elapsed = time.monotonic() - started
        sender.join(5)
    assert got == size
    return elapsed


# ---------------------------------------------------------------- hosts


def test_hosts_reach_each_other_by_address_and_loopback_is_up(topo: Topology) -> None:
    assert [topo.address(host) for host in topo.hosts] == [f"10.77.0.{n}" for n in range(1, 6)]
    for src, dst in [("w1", "srv1"), ("w1", "srv2"), ("w2", "srv1"), ("srv2", "srv1"), ("srv1", "srv2")]:
        assert reaches(topo, src, at(topo, dst)), (src, dst)
    # lo is up: a host reaches its own listener, and 127.0.0.1 is its own.
    assert reaches(topo, "srv1", at(topo, "srv1"))
    with topo.new_socket("srv2") as probe:
        probe.settimeout(SILENCE_S)
        with pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", PORT))
    # A fault named for a host the topology lacks says which it has.
    with pytest.raises(TopologyError, match=r"no host 'nope' .*hosts: w1, w2"):
        topo.partition("nope")
    with pytest.raises(TopologyError, match="from no other host"):
        topo.partition("w1", ["w1"])


# ---------------------------------------------------------------- faults


def test_partition_drops_between_the_named_hosts_only_until_healed(topo: Topology) -> None:
    fault = topo.partition("w1", ["srv1"])
    waited = times_out(topo, "w1", at(topo, "srv1"))
    assert waited >= SILENCE_S * 0.9
    assert reaches(topo, "srv1", at(topo, "srv2"))
    assert reaches(topo, "w1", at(topo, "srv2"))
    assert reaches(topo, "w2", at(topo, "srv1"))
    assert topo.dropped(fault) >= 1, topo.nft_table()  # the SYN and its retries, dropped in the fabric
    fault.undo()
    assert reaches(topo, "w1", at(topo, "srv1"))


def test_partition_from_everyone_and_an_open_connection_goes_silent(topo: Topology) -> None:
    with topo.connect("w2", at(topo, "srv1")) as open_before:
        assert roundtrip(open_before) == b"ping"
        topo.partition("srv1")
        times_out(topo, "w1", at(topo, "srv1"))
        times_out(topo, "srv2", at(topo, "srv1"))
        times_out(topo, "srv1", at(topo, "srv2"))
        assert reaches(topo, "w1", at(topo, "srv2"))
        open_before.settimeout(SILENCE_S)
        open_before.sendall(b"held")
        with pytest.raises(TimeoutError):
            open_before.recv(16)
        topo.heal()
        # TCP retransmits what was dropped: the held request is answered.
        open_before.settimeout(5)
        assert open_before.recv(16) == b"held"


def test_blackhole_is_silent_where_a_closed_port_refuses(topo: Topology) -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        topo.connect("w1", at(topo, "srv1", CLOSED_PORT)).close()
    assert time.monotonic() - started < 0.2  # the baseline: a refusal is at once

    with topo.blackhole("srv1", PORT):
        times_out(topo, "w1", at(topo, "srv1", PORT))
        assert reaches(topo, "w1", at(topo, "srv1", OTHER_PORT))
        with pytest.raises(ConnectionRefusedError):
            topo.connect("w1", at(topo, "srv1", CLOSED_PORT)).close()
    assert reaches(topo, "w1", at(topo, "srv1", PORT))

    with topo.blackhole("srv1"):
        for port in (PORT, OTHER_PORT, CLOSED_PORT):  # the closed port too: no RST, no ICMP
            times_out(topo, "w1", at(topo, "srv1", port))
        assert reaches(topo, "w1", at(topo, "srv2"))
    assert reaches(topo, "w1", at(topo, "srv1"))


def test_loss_drops_the_share_it_was_given(topo: Topology) -> None:
    clean = udp_delivered(topo, "w1", at(topo, "srv2"))
    assert clean >= 0.99
    with topo.loss("srv2", 20):
        lossy = udp_delivered(topo, "w1", at(topo, "srv2"))
        untouched = udp_delivered(topo, "w1", at(topo, "srv1"), count=300)
    # 20 % each way: a datagram and its echo both survive with 0.8² = 0.64
    # (1,500 draws: the bounds are about 10 standard deviations).
    print(f"\nloss 20%: {lossy:.3f} of 1500 datagrams echoed (expected 0.64), {clean:.3f} without loss")
    assert 0.52 <= lossy <= 0.76
    assert untouched >= 0.99
    assert udp_delivered(topo, "w1", at(topo, "srv2"), count=300) >= 0.99


def test_bandwidth_caps_a_transfer(topo: Topology) -> None:
    size = 512 * 1024
    free_s = echo_transfer_s(topo, "w1", at(topo, "srv1"), size)
    rate = 4_000_000  # bit/s: 500,000 bytes/s, so about 1 s for 512 KiB
    with topo.bandwidth("srv1", rate):
        capped_s = echo_transfer_s(topo, "w1", at(topo, "srv1"), size)
        other_s = echo_transfer_s(topo, "w1", at(topo, "srv2"), size)
    after_s = echo_transfer_s(topo, "w1", at(topo, "srv1"), size)
    measured = size / capped_s
    print(f"\nbandwidth cap 500000 B/s: measured {measured:,.0f} B/s ({capped_s:.2f} s for 512 KiB); "
          f"uncapped {size / free_s:,.0f} B/s, other host {size / other_s:,.0f} B/s, after {size / after_s:,.0f} B/s")
    # Never above the cap (but for tbf's 16 KiB burst); below it by TCP's
    # recovery from tbf's tail drops on so short a transfer (0.6-0.85 here).
    assert 0.4 * rate / 8 <= measured <= 1.1 * rate / 8
    for uncapped in (free_s, other_s, after_s):
        assert uncapped < capped_s / 4


@pytest.mark.parametrize("use_freezer", [True, False], ids=["freezer", "sigstop"])
def test_pause_holds_a_request_until_resume(use_freezer: bool) -> None:
    if use_freezer and not os.access(FREEZER_ROOT, os.W_OK):
        pytest.fail(f"{FREEZER_ROOT} is not writable: the freezer case cannot run here")
    with Topology(["c", "s"], use_freezer=use_freezer) as topology:
        server = start_echo(topology, "s")
        with topology.connect("c", at(topology, "s")) as sock:
            assert roundtrip(sock) == b"ping"
            fault = topology.pause("s")
            if use_freezer:
                cgroup = FREEZER_ROOT / topology.namespace("s")
                assert (cgroup / "freezer.state").read_text().strip() == "FROZEN"
                assert server.pid in {int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()}
            sock.settimeout(SILENCE_S)
            sock.sendall(b"while paused")
            with pytest.raises(TimeoutError):
                sock.recv(64)
            assert server.poll() is None  # neither answers nor dies
            topology.resume("s")
            assert not fault.active
            sock.settimeout(5)
            assert sock.recv(64) == b"while paused"


def test_a_process_paused_the_moment_it_is_spawned_is_paused() -> None:
    """spawn() returns once the process is in its host's cgroup: a pause
    right after it cannot miss it, whatever the machine's load."""
    with Topology(["s"], use_freezer=True) as topology:
        cgroup = FREEZER_ROOT / topology.namespace("s")
        sleepers = [topology.spawn("s", ["sleep", "30"]) for _ in range(5)]
        assert {sleeper.pid for sleeper in sleepers} <= cgroup_pids(cgroup)
        topology.pause("s")
        # A task of a FROZEN cgroup is in the refrigerator: state D, never R or S.
        states = {sleeper.pid: Path(f"/proc/{sleeper.pid}/stat").read_text().rpartition(")")[2].split()[0]
                  for sleeper in sleepers}
        assert set(states.values()) == {"D"}, states


def test_a_host_given_a_fifth_of_a_core_gets_at_most_that() -> None:
    with Topology(["slow"], cpu={"slow": 0.2}) as topology:
        cgroup = CPU_ROOT / topology.namespace("slow")
        assert (cgroup / "cpu.cfs_quota_us").read_text().strip() == "20000"
        spinner = topology.spawn("slow", ["sh", "-c", "while :; do :; done"])
        assert spinner.pid in cgroup_pids(cgroup)
        before = cpu_seconds(spinner.pid)
        time.sleep(2)
        used = cpu_seconds(spinner.pid) - before
        # 0.4 s of CPU in 2 s at most (the quota is enforced every 100 ms),
        # where an idle machine gives a spinner 2 s; a busy one may give it
        # less than its quota, so only the cap is checked.
        assert 0 < used <= 0.45, used
    with pytest.raises(TopologyError, match=r"not between 0\.01"):
        Topology(["a"], cpu={"a": 0})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- relay


def rtts(sock: socket.socket, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.monotonic()
        assert roundtrip(sock) == b"ping"
        times.append(time.monotonic() - started)
    return times


def test_relay_adds_its_delay_and_jitter_each_way(topo: Topology) -> None:
    relay = topo.relay("rl", at(topo, "srv1"), seed=7)
    assert relay.address[0] == topo.address("rl")
    with topo.connect("w1", relay.address) as sock:
        sock.settimeout(5)
        direct = statistics.median(rtts(sock, 10))
        relay.set(delay_s=0.05)
        delayed = rtts(sock, 10)
        relay.set(jitter_s=0.03)
        jittered = rtts(sock, 20)
    relay.close()
    print(f"\nrelay: RTT median {direct * 1000:.2f} ms undelayed; delay 50 ms each way: min "
          f"{min(delayed) * 1000:.1f} median {statistics.median(delayed) * 1000:.1f} max {max(delayed) * 1000:.1f} ms; "
          f"jitter ±30 ms: min {min(jittered) * 1000:.1f} max {max(jittered) * 1000:.1f} "
          f"stdev {statistics.stdev(jittered) * 1000:.1f} ms")
    assert direct < 0.02
    assert min(delayed) >= 0.099
    assert statistics.median(delayed) < 0.15
    assert min(jittered) >= 2 * 0.02 - 0.001  # never below delay - jitter, each way
    assert statistics.stdev(jittered) > 0.008  # two uniform draws of ±30 ms: about 17 ms
    assert max(jittered) - min(jittered) > 0.03


def test_relay_caps_its_rate(topo: Topology) -> None:
    relay = topo.relay("rl", at(topo, "srv2"))
    relay.set_rate(200_000)
    capped_s = echo_transfer_s(topo, "w2", relay.address, 100_000)
    relay.close()
    measured = 100_000 / capped_s
    print(f"\nrelay rate 200000 B/s: measured {measured:,.0f} B/s")
    assert 0.5 * 200_000 <= measured <= 1.2 * 200_000


def test_relay_stall_accepts_but_forwards_nothing_and_reset_sends_rst(topo: Topology) -> None:
    relay = topo.relay("rl", at(topo, "srv1"), max_connections=3)
    with topo.connect("w1", relay.address) as first:
        assert roundtrip(first) == b"ping"
        relay.stall()
        first.settimeout(SILENCE_S)
        first.sendall(b"one")
        with pytest.raises(TimeoutError):
            first.recv(16)
        with topo.connect("w2", relay.address) as second:  # accepted while stalled
            second.settimeout(SILENCE_S)
            second.sendall(b"two")
            with pytest.raises(TimeoutError):
                second.recv(16)
            relay.flow()
            first.settimeout(5)
            second.settimeout(5)
            assert first.recv(16) == b"one"
            assert second.recv(16) == b"two"
            wait_for(lambda: relay.connections == 2, "both relayed connections", timeout_s=5)
            assert relay.reset() == 2
            for sock in (first, second):
                with pytest.raises(ConnectionResetError):
                    sock.sendall(b"after reset")
                    sock.recv(16)
    # Served as before after a reset; one past max_connections is reset at once.
    held = [topo.connect("w1", relay.address) for _ in range(3)]
    try:
        assert all(roundtrip(sock) == b"ping" for sock in held)
        # On a busy machine the reset can arrive before connect() returns.
        with pytest.raises((ConnectionResetError, BrokenPipeError)), topo.connect("w2", relay.address) as extra:
            extra.settimeout(5)
            extra.sendall(b"x")
            if not extra.recv(16):
                raise ConnectionResetError("closed")
    finally:
        for sock in held:
            sock.close()
    relay.close()


# ---------------------------------------------------------------- cleanup

OWNER = """
import json, subprocess, sys, time
from tests.support.topology import Topology, start_echo
t = Topology(["a", "b"])
echo = start_echo(t, "a")
sleeper = t.spawn("b", ["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t.pause("b")
print(json.dumps({"run": t.run, "janitor": t.janitor_pid, "pids": [echo.pid, sleeper.pid]}), flush=True)
time.sleep(60)
"""


def root_namespace() -> dict[str, str]:
    """What the harness must never change outside its own namespaces (an
    address's remaining lifetime left out: it counts down by itself)."""
    shown = {what: re.sub(r"valid_lft \S+ preferred_lft \S+", "", subprocess.run(
        ["ip", "-o", *what.split()], capture_output=True, text=True, timeout=10, check=True).stdout)
        for what in ("link show", "addr show", "route show")}
    shown["nft"] = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True, timeout=10,
                                  check=True).stdout
    return shown


def leftovers(run: str) -> list[str]:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10,
                           check=True).stdout
    return ([name for name in our_namespaces() if name.startswith(run)]
            + [str(path) for path in our_cgroups() if path.name.startswith(run)]
            + [line for line in links.splitlines() if "pltopo" in line or " v-" in line])


def start_owner() -> tuple[subprocess.Popen[str], dict[str, Any]]:
    owner = subprocess.Popen([sys.executable, "-c", OWNER], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert owner.stdout is not None
    if not select.select([owner.stdout], [], [], 30)[0]:
        kill(owner)
        pytest.fail("the owner printed nothing within 30 s")
    line = owner.stdout.readline()
    assert line, f"the owner exited ({owner.wait(5)}) before building its topology"
    return owner, json.loads(line)


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"


def kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(5)
    if process.stdout is not None:
        process.stdout.close()


@contextmanager
def owner_process() -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A child that builds a topology and sleeps; whatever a failing test
    leaves of it is removed here, not left frozen for the next run."""
    owner, built = start_owner()
    try:
        yield owner, built
    finally:
        if owner.poll() is None:
            kill(owner)
        reap_run(built["run"])


def test_a_sigkilled_owner_leaves_nothing_behind() -> None:
    before = root_namespace()
    with owner_process() as (owner, built):
        assert len(leftovers(built["run"])) == 5  # a, b, the fabric, and a cgroup per host (b's frozen)
        assert alive(built["pids"][1])
        kill(owner)
        # The janitor reaps at once: no namespace, veth, cgroup or process left.
        wait_for(lambda: not leftovers(built["run"]), "the janitor to remove the dead owner's topology", timeout_s=10)
        wait_for(lambda: not any(alive(pid) for pid in (*built["pids"], built["janitor"])), "every process gone",
                 timeout_s=10)
    assert root_namespace() == before


def test_the_next_topology_reaps_what_no_janitor_could() -> None:
    before = root_namespace()
    with owner_process() as (owner, built):
        os.kill(built["janitor"], signal.SIGKILL)
        wait_for(lambda: not alive(built["janitor"]), "the janitor to die", timeout_s=5)
        kill(owner)
        time.sleep(0.2)
        assert len(leftovers(built["run"])) == 5  # nobody reaped: the frozen sleeper is still there
        assert alive(built["pids"][1])
        with Topology(["x"]):
            assert leftovers(built["run"]) == []
            assert not any(alive(pid) for pid in built["pids"])
    assert root_namespace() == before


# ---------------------------------------------------------------- errors


def test_what_is_missing_is_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def error(hosts: list[str]) -> str:
        with pytest.raises(TopologyError) as raised:
            Topology(hosts)
        assert "\n" not in str(raised.value)
        return str(raised.value)

    with monkeypatch.context() as patched:
        patched.setattr(os, "geteuid", lambda: 1000)
        assert "need root" in error(["a"])
    real_which = shutil.which
    for tool, says in [("ip", "`ip` is missing: install iproute2"), ("tc", "`tc` is missing: install iproute2")]:
        with monkeypatch.context() as patched:
            patched.setattr(shutil, "which",
                            lambda name, missing=tool: None if name == missing else real_which(name))
            assert error(["a"]) == says
    with monkeypatch.context() as patched:
        patched.setattr(shutil, "which",
                        lambda name: None if name in ("nft", "apt-get") else real_which(name))
        assert error(["a"]) == "`nft` is missing and there is no apt-get to install nftables"
    assert "host names must be unique" in error(["a", "a"])
    assert "host names must be unique" in error(["Bad_Name"])
    with pytest.raises(TopologyError, match=r"^`sleep 1` did not finish within 0.05s$"):
        topology_commands.run(["sleep", "1"], timeout_s=0.05)
