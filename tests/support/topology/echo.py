"""A TCP and UDP echo server for topology tests, and its starter.

Run as a script inside a host (``start_echo``), it imports nothing of the
project: ``python echo.py ADDRESS PORT`` echoes every TCP connection and
every UDP datagram on that port, and prints ``ready`` once both listen."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.topology.topology import Topology

MAX_CONNECTIONS = 64
READY_TIMEOUT_S = 10.0


def _echo(conn: socket.socket, slots: threading.Semaphore) -> None:
    try:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)
    except OSError:
        pass
    finally:
        slots.release()


def _udp(udp: socket.socket) -> None:
    while True:
        data, peer = udp.recvfrom(65536)
        udp.sendto(data, peer)


def serve(address: str, port: int) -> None:
    tcp = socket.create_server((address, port), backlog=MAX_CONNECTIONS)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((address, port))
    threading.Thread(target=_udp, args=(udp,), daemon=True).start()
    slots = threading.Semaphore(MAX_CONNECTIONS)
    print("ready", flush=True)
    while True:
        conn, _ = tcp.accept()
        if not slots.acquire(blocking=False):  # bounded: one past the cap is closed at once
            conn.close()
            continue
        threading.Thread(target=_echo, args=(conn, slots), daemon=True).start()


def start_echo(topology: Topology, host: str, port: int = 7000) -> subprocess.Popen[Any]:
    """An echo server on ``host``'s address, started and listening."""
    process = topology.spawn(host, [sys.executable, "-I", str(Path(__file__)), topology.address(host), str(port)],
                             stdout=subprocess.PIPE)
    assert process.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if select.select([process.stdout], [], [], 0.05)[0]:
            line = process.stdout.readline()
            if line.strip() == b"ready":
                return process
            if not line:
                break
    process.kill()
    raise RuntimeError(f"echo server on {host}:{port} not ready within {READY_TIMEOUT_S:g}s (exit {process.poll()})")


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
