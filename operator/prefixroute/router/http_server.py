"""The router's HTTP/1.1 server: one asyncio protocol per connection, requests parsed by httptools.

Requests are parsed by httptools (llhttp, the parser under uvicorn and Node.js, and under
aiohttp's own server): request line, headers, Content-Length and chunked bodies, keep-alive
rules of HTTP/1.0 and 1.1, and the refusal of malformed or ambiguous framing (both a length
and chunking, bad chunk sizes, bare line feeds). This module turns its callbacks into
`exchange.Request`s and runs one handler task per request:

- keep-alive, and pipelining: requests on one connection are answered one at a time, in
  order; heads that arrive early wait, and the connection stops reading meanwhile;
- bodies arrive while the handler runs; past `max_body_bytes` reading the body fails with
  PayloadTooLarge (413), and the rest of it is read and dropped (or, after an unanswered
  `Expect: 100-continue`, the connection closes after the answer, since the client may
  never send it); `100 Continue` goes out when the handler first reads the body;
- a head over its limits is a 431 (a URL: 414), malformed bytes a 400, each an
  OpenAI-shaped JSON error followed by closing the connection; neither is logged above
  DEBUG, so garbage on the socket cannot flood the log;
- a client that leaves cancels its request's handler: the proxy then closes the upstream
  connection, so the engine stops working on a request nobody will read. A client that
  closes its sending side (a half-close) has left too, as with aiohttp's server and
  uvicorn: HTTP clients do that when they give up, not to wait for an answer;
- a client that reads slower than the answer comes makes `write` wait (the transport's
  flow control), which stops the relay reading from the engine;
- an `Upgrade` (h2c, websocket) is ignored and the request answered as HTTP/1.1, as aiohttp
  does; its body, if it declared a length, is read after the head;
- connections idle for `keepalive_timeout` are closed; `close` stops listening, lets
  requests in flight finish within a grace period, then cancels what is left.

Not supported, because no OpenAI client needs them: TLS (a Service mesh or ingress
terminates it), HTTP/2, trailers (parsed and dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote

import httptools
from multidict import CIMultiDict

from prefixroute.router import errors
from prefixroute.router.exchange import Answer, Request, Response, error_answer, render_head

log = logging.getLogger("prefixroute.router.http")

Handler = Callable[[Request], Awaitable[Answer]]

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_NO_BODY = frozenset((204, 304))
_METHODS: dict[bytes, str] = {}  # the few methods clients send, decoded once


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int
    max_url_bytes: int = 8190  # aiohttp's limit for the request line
    max_field_bytes: int = 8190  # one header line, as aiohttp
    max_head_bytes: int = 65536  # the request line and every header together
    keepalive_timeout: float = 75.0  # aiohttp's default


_SPENT_PARSER = httptools.HttpRequestParser(object())  # what a closed connection holds instead of its parser


class _HeadTooLarge(Exception):
    pass


class _UrlTooLong(Exception):
    pass


class _BadUpgrade(Exception):
    pass


class HttpServer:
    """Listens, accepts, and keeps the set of open connections (for idle timeouts and shutdown)."""

    def __init__(self, handler: Handler, limits: ServerLimits, access_log: logging.Logger | None = None) -> None:
        self.handler = handler
        self.limits = limits
        self.access_log = access_log
        self.connections: set[HttpConnection] = set()
        self._all_closed: asyncio.Event | None = None  # while `close` waits: set when the last one goes
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, backlog: int = 2048) -> int:
        """Listen on host:port (0: any free port); returns the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: HttpConnection(self), host, port, backlog=backlog)
        self._sweep_later()
        return int(self._server.sockets[0].getsockname()[1])

    def _sweep_later(self) -> None:
        loop = asyncio.get_running_loop()
        self._sweeper = loop.call_later(min(5.0, self.limits.keepalive_timeout / 2), self._sweep)

    def _sweep(self) -> None:
        """Close connections idle past the keep-alive timeout (one timer for all of them)."""
        now = asyncio.get_running_loop().time()
        limit = self.limits.keepalive_timeout
        for conn in list(self.connections):
            if conn.idle_since is not None and now - conn.idle_since > limit:
                conn.close_now()
        self._sweep_later()

    async def close(self, grace: float) -> None:
        """Stop listening; idle connections close now, busy ones after their answer; whatever is
        still running after `grace` seconds is cancelled."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.shut_down()
        if self.connections:
            self._all_closed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), grace)
        for conn in list(self.connections):
            conn.cancel()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


class HttpConnection(asyncio.Protocol):
    """One client connection: parses its requests, serves them one at a time, writes the answers."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.remote: str | None = None
        self.parser = httptools.HttpRequestParser(self)
        # Kept: asyncio.get_running_loop() makes a getpid() system call on every call in 3.11.
        self.loop = asyncio.get_running_loop()  # made by the server's protocol factory, on the loop
        self.idle_since: float | None = None  # loop time since nothing is being received or served
        # the request whose head or body is being parsed
        self._url: list[bytes] = []
        self._headers: list[tuple[str, str]] = []
        self._head_size = 0
        self._incoming: Request | None = None
        self._upgrade_body = 0  # body bytes of an upgrade request still to come (read by hand)
        # the request being served, and heads that arrived while it was
        self._active: Request | None = None
        self._task: asyncio.Task[None] | None = None
        self._queue: deque[Request] = deque()
        self._closing = False  # close after the answer in progress
        self._reading_paused = False
        self._writing_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._malformed: errors.RouterError | None = None  # answered once the active request is done
        self._broken = False  # malformed bytes arrived: nothing more is parsed

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        peer = transport.get_extra_info("peername")
        self.remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        self.idle_since = self.loop.time()
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        server = self.server
        server.connections.discard(self)
        if not server.connections and server._all_closed is not None:
            server._all_closed.set()
        # The parser calls back into this protocol and the protocol holds the parser: a cycle
        # only the cyclic garbage collector would free. Broken here, a closed connection is
        # freed at once, however many clients connect without keep-alive.
        self.parser = _SPENT_PARSER
        cut = errors.BadRequest("the client closed the connection before sending the whole request")
        for request in (self._incoming, self._active, *self._queue):
            if request is not None:
                request._fail(cut)
        self._queue.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the proxy closes the upstream connection: the engine stops
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the client closed the connection"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return  # refused already: nothing after malformed bytes can be trusted
        if self._upgrade_body:
            data = self._take_upgrade_body(data)
        while data:
            try:
                self.parser.feed_data(data)
                return
            except httptools.HttpParserUpgrade as upgrade:
                data = self._take_upgrade_body(data[upgrade.args[0] :])
            except httptools.HttpParserError as exc:
                self._refuse(exc)
                return

    # -- httptools callbacks (from inside feed_data) ------------------------------------

    def on_message_begin(self) -> None:
        self.idle_since = None
        self._url = []
        self._headers = []
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        self._head_size += len(url)
        if self._head_size > self.limits.max_url_bytes:
            raise _UrlTooLong()
        self._url.append(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._incoming is not None:
            return  # a chunked body's trailers: dropped
        size = len(name) + len(value)
        self._head_size += size
        if size > self.limits.max_field_bytes or self._head_size > self.limits.max_head_bytes:
            raise _HeadTooLarge()
        # llhttp drops the whitespace before a value, not after it (RFC 9110 excludes both)
        self._headers.append(
            (name.decode("utf-8", "surrogateescape"), value.rstrip(b" \t").decode("utf-8", "surrogateescape"))
        )

    def on_headers_complete(self) -> None:
        parser = self.parser
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method)
        if method is None:
            method = raw_method.decode("ascii", "replace")
            if len(_METHODS) < 64:
                _METHODS[raw_method] = method
        headers: CIMultiDict[str] = CIMultiDict(self._headers)
        request = Request(
            self,
            method,
            _path_of(b"".join(self._url)),
            parser.get_http_version(),
            headers,
            parser.should_keep_alive(),
            self.limits.max_body_bytes,
        )
        if parser.should_upgrade():
            # Answered as plain HTTP/1.1 (the parser reads no body after an upgrade head: a
            # declared one is read by hand, after it); a chunked upgrade body is refused.
            if "Transfer-Encoding" in headers:
                raise _BadUpgrade()
            self._upgrade_body = request.content_length or 0
        self._incoming = request
        if self._active is None and self._malformed is None:
            self._serve_next(request)
        else:
            self._queue.append(request)
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        request = self._incoming
        if request is not None:
            request._feed(body)

    def on_message_complete(self) -> None:
        request = self._incoming
        if request is None or self._upgrade_body:
            return  # an upgrade head: its body follows, read by hand
        self._incoming = None
        request._finish()

    def _take_upgrade_body(self, data: bytes) -> bytes:
        """Give the body of an upgrade request what it declared; return the bytes after it."""
        request = self._incoming
        take = min(len(data), self._upgrade_body)
        self._upgrade_body -= take
        if request is not None:
            if take:
                request._feed(data[:take])
            if not self._upgrade_body:
                self._incoming = None
                request._finish()
        return data[take:]

    # -- serving --------------------------------------------------------------------

    def _serve_next(self, request: Request) -> None:
        self._active = request
        self._task = self.loop.create_task(self._serve(request))

    async def _serve(self, request: Request) -> None:
        try:
            self._respond(request, await self.server.handler(request))
        except Exception:  # a bug (or a header no client may receive): a 500, and the connection goes on
            log.exception("unexpected failure serving %s %s", request.method, request.path)
            self._respond(request, error_answer(errors.InternalError("the router failed to serve this request")))

    def _respond(self, request: Request, answer: Answer) -> None:
        transport = self.transport
        if isinstance(answer, Response):
            status = answer.status
            if transport is not None and not transport.is_closing():
                body = answer.body
                framing = "" if status in _NO_BODY else f"Content-Length: {len(body)}\r\n"
                if self.closes_after_response(request):
                    framing += "Connection: close\r\n"
                elif request.version == "1.0":
                    framing += "Connection: keep-alive\r\n"
                head = render_head(status, answer.reason, answer.headers, framing)
                if request.method == "HEAD" or not body or status in _NO_BODY:
                    transport.write(head)
                else:
                    transport.writelines((head, body))
            length: int | None = len(answer.body)
        else:
            status = answer.status
            length = answer.content_length
            if not answer.complete:
                self._closing = True  # the body was cut short or never began: the connection is spent
        if self.server.access_log is not None:
            self._log_access(request, status, length)
        self._done(request)

    def _log_access(self, request: Request, status: int, length: int | None) -> None:
        assert self.server.access_log is not None
        self.server.access_log.info(
            '%s "%s %s HTTP/%s" %d %s', self.remote or "-", request.method, request.path, request.version, status,
            "-" if length is None else length,
        )  # fmt: skip

    def closes_after_response(self, request: Request) -> bool:
        """Whether this answer is the connection's last (said in its head as `Connection: close`)."""
        if self._closing or not request.keep_alive:
            return True
        # The client waits for `100 Continue` before sending the body: it may never send it,
        # and the parser would then read its next request as this one's body.
        return request.expect_continue and not request.body_complete

    def close_after_response(self) -> None:
        self._closing = True

    def _done(self, request: Request) -> None:
        self._active = None
        self._task = None
        if not request.body_complete:
            request._discard = True  # answered without the whole body: the rest is dropped as it comes
        if self._malformed is not None:
            self._answer_malformed()
            return
        if self.closes_after_response(request) or self.transport is None:
            self.close_now()
            return
        if self._queue:
            self._serve_next(self._queue.popleft())
            if not self._queue:
                self._resume_reading()
            return
        self.idle_since = self.loop.time()
        self._resume_reading()

    # -- writing (for exchange.StreamResponse) ---------------------------------------------

    def send(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        transport.write(data)

    async def drain(self) -> None:
        """Wait while the client reads slower than the answer is written."""
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        if not self._writing_paused:
            return
        self._drain = drain = asyncio.get_running_loop().create_future()
        try:
            await drain
        finally:
            self._drain = None

    def continue_body(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_CONTINUE)

    # -- errors and closing -----------------------------------------------------------------

    def _refuse(self, exc: httptools.HttpParserError) -> None:
        """Malformed bytes: answer with an OpenAI-shaped error once the answer in progress is out,
        then close (the stream cannot be trusted past this point)."""
        cause = exc.__context__
        error: errors.RouterError
        if isinstance(cause, _HeadTooLarge):
            error = errors.HeadTooLarge("the request's headers are larger than the router accepts")
        elif isinstance(cause, _UrlTooLong):
            error = errors.UriTooLong("the request's URL is longer than the router accepts")
        elif isinstance(cause, _BadUpgrade):
            error = errors.BadRequest("an upgrade request with a chunked body is not supported")
        else:
            error = errors.BadRequest(f"malformed HTTP request: {exc}")
        log.debug("refused a malformed request from %s: %s", self.remote, error.message)
        self._broken = True
        self._pause_reading()
        self._closing = True
        if self._incoming is not None:
            self._incoming._fail(error)  # a handler reading this body answers with the error itself
            if self._incoming is self._active:
                return
        self._malformed = error
        if self._active is None:
            self._answer_malformed()

    def _answer_malformed(self) -> None:
        error = self._malformed
        transport = self.transport
        if error is not None and transport is not None and not transport.is_closing():
            response = error_answer(error)
            head = render_head(
                response.status,
                None,
                response.headers,
                f"Content-Length: {len(response.body)}\r\nConnection: close\r\n",
            )
            transport.writelines((head, response.body))
        self.close_now()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None and self._malformed is None:
            self._reading_paused = False
            self.transport.resume_reading()

    def close_now(self) -> None:
        """Close once what was written has gone out."""
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """End the answer in progress by closing the connection (its body is cut short)."""
        self._closing = True
        self.close_now()

    def shut_down(self) -> None:
        """The server is stopping: close now if idle, else after the answer in progress."""
        self._closing = True
        if self._active is None and self._incoming is None:
            self.close_now()

    def cancel(self) -> None:
        """Past the grace period: stop the handler and drop the connection."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.transport is not None:
            self.transport.abort()


def _path_of(url: bytes) -> str:
    """The path of a request target (origin form `/p?q`, or absolute form `http://h/p?q`),
    without the query and percent-decoded, as aiohttp's `request.path`."""
    if url[:1] != b"/":
        try:
            parsed = httptools.parse_url(url)
        except httptools.HttpParserInvalidURLError:
            return url.decode("utf-8", "surrogateescape")
        url = parsed.path or b"/"
    path = url.split(b"?", 1)[0].decode("utf-8", "surrogateescape")
    return unquote(path, errors="surrogateescape") if "%" in path else path
