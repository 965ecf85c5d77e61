"""An opt-in upstream client (`--upstream-client native`): keep-alive HTTP/1.1 over asyncio protocols.

Why it exists: measured under load, aiohttp's `ClientSession` costs about 100 µs of
Python per proxied request (request and response objects, a task per body write,
stream readers, timers) — half of the router's whole cost, and the reason it
reaches only half of sglang-router's throughput on one core. A router talks to a
handful of well-behaved HTTP/1.1 engines (uvicorn under vLLM and SGLang, aiohttp
under engine-sim), so a narrow client does: one write per request, a small head
parser, Content-Length, chunked and close-delimited bodies, a LIFO pool of idle
connections per member, flow control and the same two timeouts. It mimics the
slice of aiohttp's response API the proxy uses (`status`, `headers`,
`content.readany()`, `read()`, `release()`, `close()`) and raises aiohttp's
exception types, so the proxy has one code path and one error mapping.

Not supported, because engines never need them: TLS, proxies, redirects,
cookies, `Expect: 100-continue` (1xx answers are skipped), trailers (read and
dropped), compressed bodies (relayed undecoded, as with aiohttp here).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

_MAX_HEAD = 64 * 1024
_HIGH_WATER = 1 << 20  # buffered body bytes before the connection stops reading
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE, _IDLE = range(8)


class NativeResponse:
    """One answer: head parsed, body delivered as it arrives (and `content` is itself)."""

    __slots__ = (
        "status",
        "reason",
        "headers",
        "content_length",
        "content_type",
        "content",
        "_conn",
        "_chunks",
        "_buffered",
        "_eof",
        "_exc",
        "_waiter",
        "_read_timeout",
    )

    def __init__(
        self,
        conn: _Connection,
        status: int,
        reason: str,
        headers: CIMultiDict[str],
        length: int | None,
        read_timeout: float,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content_length = length
        self.content_type = headers.get("Content-Type", "application/octet-stream").split(";", 1)[0].strip().lower()
        self.content = self
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._read_timeout = read_timeout

    # -- fed by the connection ----------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER:
            self._conn.pause()
        self._wake()

    def _feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        if not self._eof:
            self._exc = exc
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- read by the proxy ----------------------------------------------------------

    async def readany(self) -> bytes:
        """Whatever body bytes have arrived (waiting for some), or b"" at the end."""
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._eof:
                return b""
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(self._read_timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        self._conn.resume()
        return data

    async def read(self) -> bytes:
        if self._eof and self._exc is None:  # the usual non-streamed case: it is all here already
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._buffered = 0
            return data
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Done with the answer: the connection goes back to the pool if it is clean."""
        self._conn.finished(self, reusable=self._eof and self._exc is None and not self._chunks)

    def close(self) -> None:
        self._conn.finished(self, reusable=False)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(aiohttp.ServerTimeoutError("the model server sent nothing for too long"))


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.state = _IDLE
        self.remaining = 0
        self.keep_alive = True
        self.response: NativeResponse | None = None
        self.head_waiter: asyncio.Future[NativeResponse] | None = None
        self.read_timeout = 0.0
        self.idle_since = 0.0
        self.paused = False

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.state == _UNTIL_CLOSE and exc is None and self.response is not None:
            self.response._feed_eof()
            self.state = _IDLE
            return
        error = aiohttp.ServerDisconnectedError("the model server closed the connection")
        waiter = self.head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if self.response is not None and self.state != _IDLE:
            self.response._fail(aiohttp.ClientPayloadError("the model server closed the connection mid-response"))
        self.pool.lost(self)

    def data_received(self, data: bytes) -> None:
        if self.state == _IDLE:
            self._abort()  # bytes nobody asked for: the connection is not in a known state
            return
        self.buffer += data
        try:
            self._parse()
        except ValueError as exc:
            error = aiohttp.ClientPayloadError(f"malformed answer from the model server: {exc}")
            waiter = self.head_waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
            elif self.response is not None:
                self.response._fail(error)
            self._abort()

    # -- flow control ----------------------------------------------------------------

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    # -- one exchange ----------------------------------------------------------------

    def send(self, request: bytes, read_timeout: float) -> asyncio.Future[NativeResponse]:
        assert self.transport is not None
        self.state = _HEAD
        self.response = None
        self.read_timeout = read_timeout
        self.head_waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.head_waiter

    def finished(self, response: NativeResponse, reusable: bool) -> None:
        if response is not self.response:
            return
        self.response = None
        self.resume()
        if reusable and self.keep_alive and self.state == _IDLE and self.transport is not None:
            self.idle_since = time.monotonic()
            self.pool.put(self)
        else:
            self._abort()

    def _abort(self) -> None:
        self.state = _IDLE
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()

    # -- the parser --------------------------------------------------------------------

    def _parse(self) -> None:
        buffer = self.buffer
        while buffer:
            state = self.state
            if state == _HEAD:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > _MAX_HEAD:
                        raise ValueError("response head too large")
                    return
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                self._head(head)
            elif state == _LENGTH:
                take = min(self.remaining, len(buffer))
                self._body(bytes(buffer[:take]))
                del buffer[:take]
                self.remaining -= take
                if self.remaining == 0:
                    self._done()
            elif state == _CHUNK_SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise ValueError("chunk size line too long")
                    return
                size = int(bytes(buffer[:end]).split(b";", 1)[0].strip() or b"x", 16)
                del buffer[: end + 2]
                if size < 0:
                    raise ValueError("negative chunk size")
                self.remaining = size
                self.state = _CHUNK_DATA if size else _TRAILER
            elif state == _CHUNK_DATA:
                take = min(self.remaining, len(buffer))
                self._body(bytes(buffer[:take]))
                del buffer[:take]
                self.remaining -= take
                if self.remaining == 0:
                    self.state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if len(buffer) < 2:
                    return
                if buffer[:2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                del buffer[:2]
                self.state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                del buffer[: end + 2]
                if end == 0:  # the empty line that ends the trailer
                    self._done()
            elif state == _UNTIL_CLOSE:
                self._body(bytes(buffer))
                buffer.clear()
            else:  # _IDLE: the answer is complete and more bytes came
                raise ValueError("data after the end of the answer")

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:60]!r}")
        status = int(parts[1])
        if 100 <= status < 200:
            return  # an interim answer; the real head follows
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError("header line without a colon")
            headers.add(name.strip(), value.strip())
        connection = headers.get("Connection", "").lower()
        self.keep_alive = parts[0] == "HTTP/1.1" and "close" not in connection
        length: int | None = None
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            self.state = _CHUNK_SIZE
        elif "Content-Length" in headers:
            length = int(headers["Content-Length"])
            if length < 0:
                raise ValueError("negative Content-Length")
            self.remaining = length
            self.state = _LENGTH
        elif status in (204, 304):
            length = 0
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        self.response = NativeResponse(
            self, status, parts[2] if len(parts) > 2 else "", headers, length, self.read_timeout
        )
        waiter, self.head_waiter = self.head_waiter, None
        if length == 0:
            self._done()
        if waiter is not None and not waiter.done():
            waiter.set_result(self.response)

    def _body(self, data: bytes) -> None:
        if data and self.response is not None:
            self.response._feed(data)

    def _done(self) -> None:
        self.state = _IDLE
        if self.response is not None:
            self.response._feed_eof()


class _Pool:
    """Idle connections to one member, most recently used first."""

    def __init__(self, client: NativeUpstream, host: str, port: int) -> None:
        self.client = client
        self.host = host
        self.port = port
        self.idle: list[_Connection] = []

    async def acquire(self) -> _Connection:
        client = self.client
        while True:
            now = time.monotonic()
            while self.idle:
                conn = self.idle.pop()
                if conn.transport is not None and now - conn.idle_since < client.keepalive:
                    return conn
                conn._abort()  # its connection_lost gives the slot back
            if client.opened < client.limit:
                return await client.connect(self)
            await client.wait_for_room()  # a connection came back or closed: look again

    def put(self, conn: _Connection) -> None:
        self.idle.append(conn)
        self.client.room()

    def lost(self, conn: _Connection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)
        self.client.closed_one()


class NativeUpstream:
    def __init__(self, *, connect_timeout: float, read_timeout: float, keepalive: float, limit: int) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.keepalive = keepalive
        self.limit = limit
        self.opened = 0
        self._slots: deque[asyncio.Future[None]] = deque()
        self._pools: dict[tuple[str, int], _Pool] = {}
        self._targets: dict[str, tuple[_Pool, bytes]] = {}

    def _target(self, url: str) -> tuple[_Pool, bytes]:
        """The pool and the request-line prefix for a URL (cached: members are few)."""
        found = self._targets.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise aiohttp.InvalidURL(url)
            port = parts.port or 80
            key = (parts.hostname, port)
            pool = self._pools.get(key) or self._pools.setdefault(key, _Pool(self, parts.hostname, port))
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rsplit("@", 1)[-1]
            prefix = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
            if len(self._targets) > 4096:
                self._targets.clear()
            found = self._targets[url] = (pool, prefix)
        return found

    async def post(self, url: str, *, data: bytes, headers: Mapping[str, str]) -> NativeResponse:
        pool, prefix = self._target(url)
        lines = [prefix]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(data))
        lines.append(data)
        conn = await pool.acquire()
        waiter = conn.send(b"".join(lines), self.read_timeout)
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.read_timeout, _expire_head, waiter, conn)
        try:
            return await waiter
        finally:
            timer.cancel()

    async def wait_for_room(self) -> None:
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slots.append(slot)
        await slot

    def room(self) -> None:
        """Wake everyone waiting for a connection (only ever happens at the limit)."""
        if not self._slots:
            return
        slots, self._slots = self._slots, deque()
        for slot in slots:
            if not slot.done():
                slot.set_result(None)

    async def connect(self, pool: _Pool) -> _Connection:
        self.opened += 1
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(pool), pool.host, pool.port), self.connect_timeout
            )
        except TimeoutError:
            self.closed_one()
            raise aiohttp.ServerTimeoutError(f"connecting to {pool.host}:{pool.port} timed out") from None
        except OSError as exc:
            self.closed_one()
            raise aiohttp.ClientConnectionError(f"cannot connect to {pool.host}:{pool.port}: {exc}") from None
        return conn

    def closed_one(self) -> None:
        self.opened = max(0, self.opened - 1)
        self.room()

    async def close(self) -> None:
        for pool in self._pools.values():
            for conn in pool.idle:
                conn._abort()
            pool.idle.clear()


def _expire_head(waiter: asyncio.Future[NativeResponse], conn: _Connection) -> None:
    if not waiter.done():
        waiter.set_exception(aiohttp.ServerTimeoutError("the model server did not answer in time"))
        conn._abort()
