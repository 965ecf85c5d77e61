"""The router's lean upstream client: keep-alive HTTP/1.1 over asyncio protocols, parsed by httptools.

Why it exists: measured under load, aiohttp's `ClientSession` costs about 100 µs of
Python per proxied request (request and response objects, a task per body write,
stream readers, timers) — half of the router's whole cost. A router talks to a
handful of HTTP/1.1 engines (uvicorn under vLLM and SGLang, aiohttp under
engine-sim), so a narrow client does: one write per request, a LIFO pool of idle
connections per member, flow control and the same two timeouts. Responses are
parsed by httptools (llhttp, the parser under uvicorn and Node.js), so framing —
status line, headers, Content-Length, chunked encoding with extensions and
trailers, interim 1xx answers, keep-alive rules, and the rejection of malformed
or ambiguous answers — is a well-tested parser's job, not ours; this module only
turns its callbacks into answers.

It offers the slice of aiohttp's response API the proxy uses (`status`, `reason`,
`headers`, `content.readany()`, `read()`, `release()`, `close()`) and raises only the
router's own upstream errors (`upstream`): a failure to connect (`ConnectFailed`:
nothing was sent) is told apart from a connection lost mid-exchange and from a read
timeout, which is what decides whether a request may move to another member.

Not supported, because engines never need them: TLS, proxies, redirects,
cookies, `Expect: 100-continue` (1xx answers are skipped), trailers (parsed and
dropped), upgrades (an error), compressed bodies (relayed undecoded, as with
aiohttp here).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict

from prefixroute.router.upstream import ConnectFailed, ConnectionLost, MalformedAnswer, ReadTimedOut

_HIGH_WATER = 1 << 20  # buffered body bytes before the connection stops reading
# Where a connection is in its exchange: no request out; waiting for the (final) head;
# a framed body (Content-Length or chunked: the parser says when it ends); a body that
# ends only when the engine closes the connection.
_IDLE, _HEAD, _BODY, _UNTIL_CLOSE = range(4)


class NativeResponse:
    """One answer: head parsed, body delivered as it arrives (and `content` is itself)."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_eof",
        "_exc",
        "_read_timeout",
        "_waiter",
        "content_length",
        "content_type",
        "headers",
        "reason",
        "status",
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
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._read_timeout = read_timeout

    @property
    def content(self) -> NativeResponse:
        """The body reader (aiohttp's name for it): the answer itself. A property, not an
        attribute: an answer referring to itself is a reference cycle, which only the cyclic
        garbage collector frees; one per request made it run every few hundred requests
        (~5 µs per request, and a pause of a millisecond or more each time)."""
        return self

    # -- fed by the connection ----------------------------------------------------

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER:
            self._conn.pause()
        # `_wake`, inline: this runs for every chunk of a streamed answer (9 for router-bench's
        # stream of 8 events), and most find the reader woken already or not waiting.
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _feed_eof(self) -> None:
        self._eof = True
        # `_wake`, inline: every answer ends here
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

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
            # the connection's loop, which is this one: get_running_loop() is a call, and a
            # getpid() system call in 3.11, on each wait (one per event of a streamed answer)
            loop = self._conn.loop
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
        waiter.set_exception(ReadTimedOut("the model server sent nothing for too long"))


class _Unasked(Exception):
    """An answer began while no request was waiting for one."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; also the parser's callback target."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.state = _IDLE
        self.keep_alive = True
        self.response: NativeResponse | None = None
        self.head_waiter: asyncio.Future[NativeResponse] | None = None
        self.read_timeout = 0.0
        self.idle_since = 0.0
        self.paused = False
        self.reason = ""
        self.header_list: list[tuple[str, str]] = []
        # Kept: asyncio.get_running_loop() makes a getpid() system call on every call in 3.11.
        self.loop = asyncio.get_running_loop()  # made by the loop's create_connection

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.keep_alive = False
        response, state = self.response, self.state
        self.state = _IDLE
        if state == _UNTIL_CLOSE and exc is None and response is not None:
            response._feed_eof()  # the engine's close is the end of this body
        else:
            waiter = self.head_waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(ConnectionLost("the model server closed the connection"))
            if response is not None and state != _IDLE:
                response._fail(ConnectionLost("the model server closed the connection mid-response"))
        self.pool.lost(self)

    def data_received(self, data: bytes) -> None:
        if self.state == _IDLE:
            self._abort()  # bytes nobody asked for: the connection is not in a known state
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._malformed("an upgrade the router never asked for")
        except httptools.HttpParserError as exc:
            cause = exc.__context__ if isinstance(exc.__context__, _Unasked) else exc
            self._malformed(str(cause) or type(cause).__name__)

    def _malformed(self, what: str) -> None:
        error = MalformedAnswer(f"malformed answer from the model server: {what}")
        waiter = self.head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        elif self.response is not None:
            self.response._fail(error)
        self._abort()

    # -- httptools callbacks (called from inside feed_data) ---------------------------

    def on_message_begin(self) -> None:
        if self.state != _HEAD:
            raise _Unasked("data after the end of the answer")
        self.reason = ""
        self.header_list = []

    def on_status(self, reason: bytes) -> None:
        self.reason = reason.decode("utf-8", "surrogateescape")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state == _HEAD:  # after the head, these are a chunked body's trailers: dropped
            # llhttp drops the whitespace before a value, not after it (RFC 9110 excludes both).
            # Decoded as aiohttp decodes them (UTF-8, other bytes as surrogate escapes), so the
            # router's server writes back exactly the bytes the engine sent.
            self.header_list.append(
                (name.decode("utf-8", "surrogateescape"), value.rstrip(b" \t").decode("utf-8", "surrogateescape"))
            )

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            return  # an interim answer; its end follows, then the real head
        headers: CIMultiDict[str] = CIMultiDict(self.header_list)
        self.keep_alive = self.parser.should_keep_alive()
        length: int | None = None
        if status in (204, 304):  # never a body, whatever the head says (the parser agrees)
            length = 0
            self.state = _BODY
        elif "Transfer-Encoding" in headers:
            # chunked only when it is the last coding, as the parser reads it; a body in
            # any other coding ends when the connection does
            codings = ",".join(headers.getall("Transfer-Encoding"))
            chunked = codings.rsplit(",", 1)[-1].strip().lower() == "chunked"
            self.state = _BODY if chunked else _UNTIL_CLOSE
            self.keep_alive = self.keep_alive and chunked
        elif "Content-Length" in headers:
            length = int(headers["Content-Length"])  # the parser has checked it: one non-negative number
            self.state = _BODY
        else:
            self.state = _UNTIL_CLOSE
            self.keep_alive = False
        self.response = NativeResponse(self, status, self.reason, headers, length, self.read_timeout)
        waiter, self.head_waiter = self.head_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(self.response)

    def on_body(self, data: bytes) -> None:
        if self.response is not None:
            self.response._feed(data)

    def on_message_complete(self) -> None:
        if self.state == _HEAD:
            return  # the end of an interim answer
        self.state = _IDLE
        if self.response is not None:
            self.response._feed_eof()

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
        self.head_waiter = self.loop.create_future()
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


class _Pool:
    """Idle connections to one member, most recently used first."""

    def __init__(self, client: NativeUpstream, host: str, port: int) -> None:
        self.client = client
        self.host = host
        self.port = port
        self.idle: list[_Connection] = []

    def take_idle(self) -> _Connection | None:
        """The most recently used idle connection still fresh, without waiting (None: none)."""
        if self.idle:
            now = time.monotonic()
            keepalive = self.client.keepalive
            while self.idle:
                conn = self.idle.pop()
                if conn.transport is not None and now - conn.idle_since < keepalive:
                    return conn
                conn._abort()  # its connection_lost gives the slot back
        return None

    async def acquire(self) -> _Connection:
        client = self.client
        while True:
            conn = self.take_idle()
            if conn is not None:
                return conn
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
        self._targets: dict[tuple[str, str], tuple[_Pool, bytes]] = {}
        # Connections awaiting an answer's head, and when it is overdue (`_sweep`).
        self._heads: dict[_Connection, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._sweep_every = min(1.0, max(0.01, read_timeout / 8))

    def _target(self, method: str, url: str) -> tuple[_Pool, bytes]:
        """The pool and the request-line prefix for a URL (cached: members are few)."""
        found = self._targets.get((method, url))
        if found is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or not parts.hostname:
                raise ConnectFailed(f"cannot connect to {url!r}: only http:// URLs with a host are supported")
            port = parts.port or 80
            key = (parts.hostname, port)
            pool = self._pools.get(key) or self._pools.setdefault(key, _Pool(self, parts.hostname, port))
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rsplit("@", 1)[-1]
            prefix = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
            if len(self._targets) > 4096:
                self._targets.clear()
            found = self._targets[(method, url)] = (pool, prefix)
        return found

    async def send(self, method: str, url: str, *, data: bytes, headers: Mapping[str, str]) -> NativeResponse:
        """Send one request and return its answer once the head is in; the caller reads the
        body and then `release`s or `close`s it. Raises only `upstream.UpstreamFailure`."""
        pool, prefix = self._target(method, url)
        lines = [prefix]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        lines.append(b"Content-Length: %d\r\n\r\n" % len(data))
        lines.append(data)
        conn = pool.take_idle() or await pool.acquire()  # a warm connection needs no coroutine
        waiter = conn.send(b"".join(lines), self.read_timeout)
        heads = self._heads
        heads[conn] = time.monotonic() + self.read_timeout
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep)
        try:
            return await waiter
        except asyncio.CancelledError:
            conn._abort()  # nobody will read this answer (the client left): the engine sees the close and stops
            raise
        finally:
            heads.pop(conn, None)

    def _sweep(self) -> None:
        """Fail the heads overdue now; look again while any is awaited.

        One timer for all the heads awaited, not one per request: a timer armed and
        cancelled costs 1.7 µs on uvloop, about 1% of a request's CPU in the router. A
        head is failed up to `_sweep_every` late (an eighth of the read timeout, at most 1 s)."""
        now = time.monotonic()
        for conn in [conn for conn, deadline in self._heads.items() if deadline <= now]:
            del self._heads[conn]
            waiter = conn.head_waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(ReadTimedOut("the model server did not answer in time"))
                conn._abort()
        self._sweeper = asyncio.get_running_loop().call_later(self._sweep_every, self._sweep) if self._heads else None

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
            # A black-holed address (a dead node's pod IP drops every SYN): nothing was sent.
            self.closed_one()
            raise ConnectFailed(f"connecting to {pool.host}:{pool.port} timed out", timed_out=True) from None
        except OSError as exc:  # refused, no route, a name that does not resolve
            self.closed_one()
            raise ConnectFailed(f"cannot connect to {pool.host}:{pool.port}: {exc}") from exc
        return conn

    def closed_one(self) -> None:
        self.opened = max(0, self.opened - 1)
        self.room()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for pool in self._pools.values():
            for conn in pool.idle:
                conn._abort()
            pool.idle.clear()
