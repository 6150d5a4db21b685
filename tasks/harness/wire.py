"""A raw asyncio HTTP/1.1 keep-alive client for streamed POSTs: the harness's hot path.

At most `max_connections` requests are on the wire at once; the others wait on a semaphore (first come, first
served) and never hold a connection or a socket while they wait. Each connection is an `asyncio.Protocol` whose
bytes go straight into a `ResponseParser`; the event payloads completed by each read are handed to the request's
`on_events` callback on the event loop, as one list, in order. A request whose keep-alive connection turns out to
be closed before any byte of the answer came back is sent again once on a new connection (the server closed an
idle connection).
`abort()` ends every request of a pool at once and refuses new ones (a replica the dispatch gave up on,
tasks/harness/dispatch.py); `last_read` is when any of its connections last received bytes.

    pool = HttpPool("http://127.0.0.1:8000", max_connections=64)
    status, error_body = await pool.stream(post_bytes("/v1/completions", body, pool.host_header), on_events)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import monotonic
from urllib.parse import urlsplit

from submission.base.errors import LaunchError
from tasks import clock
from tasks.harness.sse import ProtocolError, ResponseParser

CONNECT_TIMEOUT_S = 10.0   # real seconds (tasks.clock.real) for a new connection to the engine


def post_bytes(path: str, body: bytes, host: str) -> bytes:
    """A complete HTTP/1.1 POST of a JSON body that asks for server-sent events, ready to write."""
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


class _Connection(asyncio.Protocol):
    def __init__(self, pool: HttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.on_events: Callable[[list[bytes]], None] | None = None
        self.waiter: asyncio.Future | None = None
        self.received = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, request: bytes, on_events: Callable[[list[bytes]], None], waiter: asyncio.Future) -> None:
        self.parser, self.on_events, self.waiter, self.received = ResponseParser(), on_events, waiter, False
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        self.received = True
        self.pool.last_read = monotonic()
        try:
            events = parser.feed(data)
            if events and parser.status == 200:
                self.on_events(events)
        except Exception as e:   # a bad response or a callback's error ends this request, not the loop
            self._end(e)
            return
        if parser.done:
            self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser, waiter = self.parser, self.waiter
        if parser is None or waiter is None or waiter.done():
            return
        try:
            events = parser.close()
            if events and parser.status == 200:
                self.on_events(events)
            self._end(None)
        except Exception as e:
            self._end(e if self.received else _Stale(str(exc or e)))

    def _end(self, error: Exception | None) -> None:
        waiter, self.waiter = self.waiter, None
        if error is not None:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        if waiter is not None and not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


class _Stale(ConnectionError):
    """The connection was closed before any byte of the answer came back."""


class HttpPool:
    def __init__(self, base_url: str, *, max_connections: int, connect_timeout: float = CONNECT_TIMEOUT_S) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise LaunchError(f"the harness client speaks plain http://host:port only, not {base_url!r}",
                              fix="point the endpoint at the engine's plain-HTTP address")
        self.host, self.port = url.hostname, url.port or 80
        self.prefix = url.path.rstrip("/")
        self.host_header = url.netloc
        self.max_connections = max_connections
        self.connect_timeout = clock.real(connect_timeout)   # real seconds, whatever this process's clock
        self.idle: list[_Connection] = []
        self.open = 0
        self.peak_open = 0
        self.last_read = monotonic()
        self.busy: set[_Connection] = set()
        self.aborted = False
        self._slots: asyncio.Semaphore | None = None

    async def stream(self, request: bytes, on_events: Callable[[list[bytes]], None]) -> tuple[int, bytes]:
        """Send `request` (from `post_bytes`); `on_events` gets the event payloads of a 200 answer. Returns the
        status and, for any other status, the start of the body. Connection errors raise OSError."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        async with self._slots:
            for attempt in (0, 1):
                conn = await self._connection()
                waiter = asyncio.get_running_loop().create_future()
                conn.send(request, on_events, waiter)
                self.busy.add(conn)
                try:
                    await waiter
                except _Stale:
                    self._drop(conn)
                    if attempt or self.aborted:
                        raise
                    continue
                except BaseException:
                    self._drop(conn)
                    raise
                finally:
                    self.busy.discard(conn)
                parser = conn.parser
                if parser.keep_alive and not conn.closed:
                    conn.parser = conn.on_events = None
                    self.idle.append(conn)
                else:
                    self._drop(conn)
                return parser.status, bytes(parser.body)
        raise AssertionError("unreachable")

    async def _connection(self) -> _Connection:
        if self.aborted:
            raise ConnectionAbortedError(f"{self.host}:{self.port}: given up on")
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
            self.open -= 1
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(loop.create_connection(lambda: _Connection(self), self.host, self.port),
                                         self.connect_timeout)
        self.open += 1
        self.peak_open = max(self.peak_open, self.open)
        return conn

    def _drop(self, conn: _Connection) -> None:
        self.open -= 1
        conn.closed = True
        if conn.transport is not None:
            conn.transport.close()

    def abort(self) -> None:
        """End every request on the wire (each raises) and refuse new ones: the server is given up on."""
        self.aborted = True
        for conn in [*self.busy, *self.idle]:
            if conn.transport is not None:
                conn.transport.close()

    async def aclose(self) -> None:
        while self.idle:
            self._drop(self.idle.pop())


__all__ = ["HttpPool", "ProtocolError", "post_bytes"]
