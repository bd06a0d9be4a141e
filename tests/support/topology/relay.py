"""A user-space TCP relay for what this kernel cannot do (it has no netem):
delay, jitter and a bandwidth cap per connection, a stall (connections are
accepted and held, nothing is forwarded) and a reset (every connection
closed with an RST), and a lost reply (``lose_reply_to``). Clients dial
the relay's address instead of the target's.

One asyncio loop in one thread serves every connection; it may enter a
network namespace first, so the relay listens and dials out from a host of a
topology. Bounded: at most ``max_connections`` (more are reset at once), and
per direction at most ``buffered_chunks`` chunks of ``chunk_bytes`` held,
after which the relay stops reading and TCP pushes back on the sender."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from tests.support.topology.netns import entered

CONTROL_TIMEOUT_S = 5.0
RST_LINGER = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


def _reset_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RST_LINGER)
    sock.close()


@dataclass(eq=False)  # held in a set: hashed by identity
class _Connection:
    client: socket.socket
    upstream: socket.socket
    task: asyncio.Task[None] | None = None
    reset: bool = False
    mute: bool = False  # nothing more goes back to the client


class Relay:
    """Forwards TCP from ``listen`` to ``target``. ``delay_s`` is added in
    each direction (a request and its answer: twice), plus a uniform draw
    in ``[-jitter_s, +jitter_s]`` per chunk (never reordering the stream);
    ``rate`` caps each direction of each connection in bytes per second.
    All three may be changed while it runs (``set``, ``set_rate``)."""

    def __init__(self, target: tuple[str, int], *, listen: tuple[str, int] = ("127.0.0.1", 0),
                 netns: str | None = None, delay_s: float = 0.0, jitter_s: float = 0.0, rate: float | None = None,
                 max_connections: int = 64, chunk_bytes: int = 16 * 1024, buffered_chunks: int = 16,
                 connect_timeout_s: float = 5.0, seed: int | None = None) -> None:
        self.target = target
        self.delay_s, self.jitter_s, self.rate = delay_s, jitter_s, rate
        self.max_connections, self.chunk_bytes, self.buffered_chunks = max_connections, chunk_bytes, buffered_chunks
        self.connect_timeout_s = connect_timeout_s
        self._random = random.Random(seed)
        self._marker: bytes | None = None
        self.marked = 0  # chunks to the target holding the marker (``lose_reply_to``)
        self._connections: set[_Connection] = set()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._flowing: asyncio.Event | None = None
        self.address: tuple[str, int] = listen
        self._thread = threading.Thread(target=self._serve, args=(listen, netns), name="relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(CONTROL_TIMEOUT_S):
            raise TimeoutError(f"relay to {target} not listening within {CONTROL_TIMEOUT_S:g}s")
        if self._failure is not None:
            raise self._failure

    # ------------------------------------------------------------ control

    def set(self, *, delay_s: float | None = None, jitter_s: float | None = None) -> None:
        """Changes the delay or jitter of chunks read from now on."""
        if delay_s is not None:
            self.delay_s = delay_s
        if jitter_s is not None:
            self.jitter_s = jitter_s

    def set_rate(self, rate: float | None) -> None:
        """Caps each direction of each connection at ``rate`` bytes per
        second from now on; None lifts the cap."""
        self.rate = rate

    def lose_reply_to(self, marker: bytes) -> None:
        """From now on counts in ``marked`` the chunks sent to the target
        that hold ``marker`` (a method's name, say); the first one's
        connection sends nothing more back: that request is made, its
        answer never comes."""
        self._marker, self.marked = marker, 0

    def stall(self) -> None:
        """Keeps accepting, forwards nothing either way, until ``flow()``."""
        self._call(lambda: self._events()[1].clear())

    def flow(self) -> None:
        self._call(lambda: self._events()[1].set())

    def reset(self) -> int:
        """Closes every connection with an RST, both to the client and to the
        target; how many there were. New connections are served as before."""
        loop = self._running_loop()
        return asyncio.run_coroutine_threadsafe(self._reset_all(), loop).result(CONTROL_TIMEOUT_S)

    @property
    def connections(self) -> int:
        return len(self._connections)

    def close(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            stop, _ = self._events()
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(CONTROL_TIMEOUT_S)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._failure is not None:
            raise RuntimeError(f"the relay to {self.target} failed: {self._failure!r}")
        if self._loop is None or not self._thread.is_alive():
            raise RuntimeError("the relay is closed")
        return self._loop

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        assert self._stop is not None and self._flowing is not None
        return self._stop, self._flowing

    def _call(self, fn: Callable[[], object]) -> None:
        self._running_loop().call_soon_threadsafe(fn)

    # ------------------------------------------------------------ the loop

    def _serve(self, listen: tuple[str, int], netns: str | None) -> None:
        try:
            with entered(netns) if netns else contextlib.nullcontext():
                asyncio.run(self._main(listen))
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor's thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self, listen: tuple[str, int]) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop, self._flowing = asyncio.Event(), asyncio.Event()
        self._flowing.set()
        listener = socket.create_server(listen, backlog=self.max_connections)
        listener.setblocking(False)
        self.address = listener.getsockname()[:2]
        self._ready.set()
        accepting = asyncio.create_task(self._accept(listener))
        accepting.add_done_callback(self._accepting_ended)
        try:
            await self._stop.wait()
        finally:
            accepting.cancel()
            listener.close()
            await self._reset_all()

    def _accepting_ended(self, task: asyncio.Task[None]) -> None:
        """A relay that stopped accepting by accident stops, and says why at
        the next call rather than leaving clients to time out."""
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()
            self._events()[0].set()

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, _ = await loop.sock_accept(listener)
            if len(self._connections) >= self.max_connections:
                _reset_close(client)
                continue
            client.setblocking(False)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setblocking(False)
            connection = _Connection(client, upstream)
            self._connections.add(connection)
            connection.task = asyncio.create_task(self._serve_connection(connection))

    async def _serve_connection(self, connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_connect(connection.upstream, self.target), self.connect_timeout_s)
            # A task group: when one direction fails, the other is cancelled.
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pipe(connection.client, connection.upstream, connection, to_target=True))
                group.create_task(self._pipe(connection.upstream, connection.client, connection, to_target=False))
        except* (OSError, TimeoutError):
            connection.reset = True  # one side broke: the other learns at once
        finally:
            self._connections.discard(connection)
            for sock in (connection.client, connection.upstream):
                if connection.reset:
                    _reset_close(sock)
                else:
                    sock.close()

    def _sample_delay(self) -> float:
        jitter = self._random.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
        return max(0.0, self.delay_s + jitter)

    async def _pipe(self, source: socket.socket, sink: socket.socket, connection: _Connection, *,
                    to_target: bool) -> None:
        """One direction of ``connection``: a reader stamps each chunk with
        when it may arrive, a writer sends it then; the queue between them
        is the bound."""
        loop = asyncio.get_running_loop()
        _, flowing = self._events()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(self.buffered_chunks)

        async def read() -> None:
            departs = arrives = 0.0
            while data := await loop.sock_recv(source, self.chunk_bytes):
                if to_target and self._marker is not None and self._marker in data:
                    self.marked += 1
                    connection.mute = connection.mute or self.marked == 1  # before the request goes on
                now = loop.time()
                departs = max(now, departs) + (len(data) / self.rate if self.rate else 0.0)
                arrives = max(arrives, departs + self._sample_delay())
                await queue.put((arrives, data))
            await queue.put((0.0, b""))

        async def write() -> None:
            while True:
                arrives, data = await queue.get()
                await flowing.wait()
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                if (wait := arrives - loop.time()) > 0:
                    await asyncio.sleep(wait)
                await flowing.wait()
                if connection.mute and not to_target:
                    continue
                await loop.sock_sendall(sink, data)

        async with asyncio.TaskGroup() as group:
            group.create_task(read())
            group.create_task(write())

    async def _reset_all(self) -> int:
        connections = list(self._connections)
        for connection in connections:
            connection.reset = True
            if connection.task is not None:
                connection.task.cancel()
        tasks = [connection.task for connection in connections if connection.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(connections)
