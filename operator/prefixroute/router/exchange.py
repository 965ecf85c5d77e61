"""One request and its answer, as the router's handlers see them (the server: `http_server`).

A `Request` is what the server parsed: method, path, headers (a case-insensitive
multidict, decoded as aiohttp decodes them: UTF-8 with surrogate escapes, so any byte
survives the round trip to the engine), the peer's address, and a body that arrives
while the handler runs (`read`). An answer is either a `Response` — complete, sent
with its head in one write — or a `StreamResponse`, whose head goes out at `prepare`
and whose body goes out piece by piece (`write`, `write_eof`), chunked when its length
is unknown. The slice of aiohttp's request and response API the proxy used is kept
(names and meaning), so the proxy's code reads the same.

Why not aiohttp's server: measured on the loaded development machine, aiohttp's server
spent about 50 µs of CPU per request answering a fixed body (request and response
objects, a task, stream readers, the router's resolver), a quarter of the router's
whole cost; a bare httptools protocol answered the same in 5-10 µs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol

from multidict import CIMultiDict

from prefixroute.front.errors import JSON_CONTENT_TYPE, PayloadTooLarge, ServingError


class Connection(Protocol):
    """What a request and its answer need of the connection they arrived on (the server's
    `http_server.HttpConnection`)."""

    @property
    def remote(self) -> str | None: ...

    def continue_body(self) -> None: ...
    def send(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def closes_after_response(self, request: Request) -> bool: ...
    def close_after_response(self) -> None: ...
    def abort(self) -> None: ...


_REASONS = {s.value: s.phrase for s in HTTPStatus}
_NO_BODY = frozenset((204, 304))


def reason_of(status: int) -> str:
    return _REASONS.get(status, "Unknown")


class _DateHeader:
    """The `Date` header line, rendered once per second (RFC 9110 asks origin servers for it)."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = ""

    def line(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._line = "Date: " + formatdate(now, usegmt=True) + "\r\n"
        return self._line


DATE = _DateHeader()


def render_head(status: int, reason: str | None, headers: Mapping[str, str], framing: str) -> bytes:
    """A response head: status line, the given headers, then `framing` (the length, chunking
    and connection lines the server decides), the date and the blank line.

    A header value holding CR or LF would let whoever chose it write headers of their own
    (a member name from a ring file, a relayed engine header): refused, as aiohttp refuses it."""
    # Concatenated rather than appended to a list and joined: a head has a handful of lines,
    # and every answer renders one (the list cost an append call per line and a join).
    head = f"HTTP/1.1 {status} {reason or reason_of(status)}\r\n"
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        head += f"{name}: {value}\r\n"
    return (head + framing + DATE.line() + "\r\n").encode("utf-8", "surrogateescape")


class Request:
    """A parsed request head; its body arrives as the handler reads it (`read`)."""

    __slots__ = (
        "_chunks",
        "_complete",
        "_conn",
        "_discard",
        "_error",
        "_limit",
        "_size",
        "_waiter",
        "content_length",
        "expect_continue",
        "headers",
        "keep_alive",
        "method",
        "path",
        "remote",
        "version",
    )

    def __init__(
        self,
        conn: Connection,
        method: str,
        path: str,
        version: str,
        headers: CIMultiDict[str],
        keep_alive: bool,
        limit: int,
    ) -> None:
        self.method = method
        self.path = path  # without the query, percent-decoded as aiohttp's `request.path`
        self.version = version  # "1.1", "1.0"
        self.headers = headers
        self.remote = conn.remote
        self.keep_alive = keep_alive
        length = headers.get("Content-Length")
        self.content_length = int(length) if length is not None else None  # the parser checked it
        self.expect_continue = version == "1.1" and headers.get("Expect", "").lower() == "100-continue"
        self._conn = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = limit
        self._complete = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._discard = False  # answered already: the rest of the body is read and dropped

    # -- fed by the connection ----------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self._discard or self._error is not None:
            return
        self._size += len(data)
        if self._size > self._limit:
            self._chunks.clear()
            self._fail(PayloadTooLarge(f"request body is larger than {self._limit} bytes"))
            return
        self._chunks.append(data)

    def _finish(self) -> None:
        self._complete = True
        # `_wake`, inline: every request's body ends here, and mostly nobody waits for it yet
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if self._error is None and not self._complete:
            self._error = error
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def body_complete(self) -> bool:
        return self._complete

    # -- read by the handler ------------------------------------------------------

    def body_now(self) -> bytes | None:
        """The whole body when it is all in and nothing is wrong, else None (then `read`)."""
        if self._complete and self._error is None and len(self._chunks) == 1 and not self.expect_continue:
            return self._chunks[0]
        return None

    async def read(self) -> bytes:
        """The whole body; PayloadTooLarge past the limit, ConnectionResetError if the client left."""
        while True:
            if self._error is not None:
                raise self._error
            if self._complete:
                break
            if self.expect_continue:
                self.expect_continue = False
                self._conn.continue_body()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunks = self._chunks
        if len(chunks) == 1:
            return chunks[0]
        data = b"".join(chunks)
        chunks.clear()
        if data:
            chunks.append(data)
        return data


class Response:
    """A complete answer: the server sends head and body in one write."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(
        self,
        status: int = 200,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        reason: str | None = None,
        content_type: str | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers: CIMultiDict[str] = headers if isinstance(headers, CIMultiDict) else CIMultiDict(headers or ())
        if content_type is not None:
            self.headers["Content-Type"] = content_type
        self.body = body


class StreamResponse:
    """An answer sent as it arrives: `prepare` sends the head, `write` each piece, `write_eof` the end.

    With `content_length` set the body is sent as is; otherwise chunked (or, to an HTTP/1.0
    client, until the connection closes). `write` waits while the client reads slower than
    the answer comes (the transport's buffer is full), so a slow client slows the relay
    instead of filling the router's memory."""

    __slots__ = ("_chunked", "_conn", "_done", "_prepared", "content_length", "headers", "reason", "status")

    def __init__(self, status: int = 200, reason: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.headers: CIMultiDict[str] = headers if isinstance(headers, CIMultiDict) else CIMultiDict(headers or ())
        self.content_length: int | None = None
        self._conn: Connection | None = None
        self._chunked = False
        self._prepared = False
        self._done = False

    @property
    def prepared(self) -> bool:
        return self._prepared

    @property
    def complete(self) -> bool:
        """The whole body went out (`write_eof`): the connection may serve another request."""
        return self._done

    async def prepare(self, request: Request) -> None:
        if self._prepared:
            return
        conn = request._conn
        self._conn = conn
        self._prepared = True
        bodyless = self.status in _NO_BODY or request.method == "HEAD"
        if bodyless:
            framing = ""
        elif self.content_length is not None:
            framing = f"Content-Length: {self.content_length}\r\n"
        elif request.version == "1.1":
            framing = "Transfer-Encoding: chunked\r\n"
            self._chunked = True
        else:
            framing = ""  # HTTP/1.0: the body ends when the connection does
            conn.close_after_response()
        if conn.closes_after_response(request):
            framing += "Connection: close\r\n"
        elif request.version == "1.0":
            framing += "Connection: keep-alive\r\n"
        conn.send(render_head(self.status, self.reason, self.headers, framing))
        if bodyless:
            self._done = True
        await conn.drain()

    async def write(self, data: bytes) -> None:
        conn = self._conn
        if conn is None:
            raise RuntimeError("write before prepare")
        if not data:
            return
        if self._chunked:
            conn.send(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            conn.send(data)
        await conn.drain()

    async def write_eof(self) -> None:
        conn = self._conn
        if conn is None or self._done:
            return
        if self._chunked:
            conn.send(b"0\r\n\r\n")
        self._done = True
        await conn.drain()

    def abort(self) -> None:
        """End the answer here by closing the connection: the client sees a truncated body
        (a short Content-Length, or a chunked body without its last chunk), never a wrong one."""
        if self._conn is not None:
            self._conn.abort()


Answer = Response | StreamResponse


def error_answer(error: ServingError) -> Response:
    """An error as the router's HTTP answer: its status, its headers, its JSON body."""
    response = Response(error.status, error.body(), error.headers)
    response.headers["Content-Type"] = JSON_CONTENT_TYPE
    return response
