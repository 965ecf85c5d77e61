"""The router's HTTP/1.1 server on a real socket: keep-alive, pipelining, bodies and their limits,
100-continue, malformed and oversized heads, upgrades, half-closes, clients that leave or read
slowly, idle connections and shutdown. Handlers here are small scripted ones; the router's
own endpoints through this server are tested everywhere else in tests/router."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from prefixroute.router import errors
from prefixroute.router.exchange import Answer, Request, Response, StreamResponse, error_answer
from prefixroute.router.http_server import HttpConnection, HttpServer, ServerLimits


class Scripted:
    """A handler: echoes method, path and body as JSON, or runs a per-path script."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        self.scripts: dict[str, Callable[[Request], Awaitable[Answer]]] = {}
        self.cancelled = asyncio.Event()

    async def __call__(self, request: Request) -> Answer:
        script = self.scripts.get(request.path)
        if script is not None:
            return await script(request)
        try:
            body = await request.read()
        except errors.RouterError as error:  # as the proxy answers them
            return error_answer(error)
        self.seen.append((request.method, request.path, body))
        out = {"method": request.method, "path": request.path, "body": body.decode(), "version": request.version}
        return Response(200, json.dumps(out).encode(), content_type="application/json")


@pytest.fixture
async def served() -> AsyncIterator[Callable[..., Awaitable[tuple[HttpServer, Scripted, int]]]]:
    servers: list[HttpServer] = []

    async def start(**limits: Any) -> tuple[HttpServer, Scripted, int]:
        handler = Scripted()
        server = HttpServer(handler, ServerLimits(**{"max_body_bytes": 1000, **limits}))
        port = await server.start("127.0.0.1", 0)
        servers.append(server)
        return server, handler, port

    yield start
    for server in servers:
        await server.close(0.1)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer off the wire (Content-Length or chunked)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    while lines[0].startswith("HTTP/1.1 100"):  # an interim answer
        lines = lines[2:]
        if not lines or not lines[0]:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            parts.append(await reader.readexactly(size + 2))
            if size == 0:
                break
        body = b"".join(p[:-2] for p in parts)
    else:
        body = await asyncio.wait_for(reader.read(), 10)
    return status, headers, body


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def test_keep_alive_and_pipelined_requests_are_answered_in_order(served) -> None:
    _, _handler, port = await served()
    reader, writer = await connect(port)
    writer.write(post("/a", b"one") + post("/b", b"two") + b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
    answers = [await read_answer(reader) for _ in range(3)]
    assert [json.loads(a[2])["path"] for a in answers] == ["/a", "/b", "/c"]
    assert [json.loads(a[2])["body"] for a in answers] == ["one", "two", ""]
    writer.write(post("/d", b"four"))  # the same connection goes on
    assert json.loads((await read_answer(reader))[2])["body"] == "four"
    writer.close()


async def test_a_slow_answer_holds_the_next_pipelined_one_back(served) -> None:
    _, handler, port = await served()
    release = asyncio.Event()

    async def slow(request: Request) -> Answer:
        await release.wait()
        return Response(200, b"slow")

    handler.scripts["/slow"] = slow
    reader, writer = await connect(port)
    writer.write(post("/slow", b"") + post("/fast", b"x"))
    await asyncio.sleep(0.05)
    assert handler.seen == []  # the second request waits its turn
    release.set()
    assert (await read_answer(reader))[2] == b"slow"
    assert json.loads((await read_answer(reader))[2])["path"] == "/fast"
    writer.close()


async def test_chunked_bodies_and_the_body_limit(served) -> None:
    _, _handler, port = await served(max_body_bytes=10)
    reader, writer = await connect(port)
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n"
    )
    assert json.loads((await read_answer(reader))[2])["body"] == "abcde"
    writer.write(
        b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n"
    )
    status, _headers, body = await read_answer(reader)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"
    writer.write(post("/after", b"ok"))  # the oversize body was read and dropped: the connection goes on
    assert json.loads((await read_answer(reader))[2])["body"] == "ok"
    writer.close()


async def test_body_now_is_the_body_only_once_all_of_it_is_in(served) -> None:
    _, handler, port = await served()
    seen: list[bytes | None] = []

    async def peek(request: Request) -> Answer:
        seen.append(request.body_now())
        body = await request.read()
        seen.append(request.body_now())
        return Response(200, body)

    handler.scripts["/peek"] = peek
    reader, writer = await connect(port)
    writer.write(b"POST /peek HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
    await asyncio.sleep(0.05)  # the head alone: the handler starts before the body is in
    writer.write(b"he")
    await asyncio.sleep(0.05)
    writer.write(b"llo")
    assert (await read_answer(reader))[2] == b"hello"
    assert seen == [None, b"hello"]
    seen.clear()
    writer.write(post("/peek", b"abc"))  # head and body in one packet: in before the handler runs
    assert (await read_answer(reader))[2] == b"abc"
    assert seen == [b"abc", b"abc"]
    writer.close()


async def test_100_continue_is_sent_when_the_body_is_read(served) -> None:
    _, _handler, port = await served()
    reader, writer = await connect(port)
    writer.write(b"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hello")
    assert json.loads((await read_answer(reader))[2])["body"] == "hello"
    writer.close()


async def test_an_answer_before_an_expected_body_closes_the_connection(served) -> None:
    _, handler, port = await served()

    async def refuse(request: Request) -> Answer:
        return error_answer(errors.NotFound("no"))

    handler.scripts["/refused"] = refuse
    reader, writer = await connect(port)
    writer.write(b"POST /refused HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
    status, headers, _ = await read_answer(reader)
    assert status == 404
    assert headers["connection"] == "close"  # the client may never send the body
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


@pytest.mark.parametrize(
    ("wire", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /a HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40), 400),
        (b"GET /health HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
        (
            b"POST /a HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
        ),
    ],
)
async def test_malformed_or_oversized_heads_get_an_openai_error_and_a_close(served, wire: bytes, status: int) -> None:
    _, handler, port = await served()
    reader, writer = await connect(port)
    writer.write(wire)
    got, headers, body = await read_answer(reader)
    assert got == status
    assert headers["connection"] == "close"
    assert set(json.loads(body)["error"]) == {"message", "type", "param", "code"}
    assert await asyncio.wait_for(reader.read(), 10) == b""
    assert handler.seen == []
    writer.close()


async def test_garbage_after_a_good_request_is_refused_after_its_answer(served) -> None:
    _, _handler, port = await served()
    reader, writer = await connect(port)
    writer.write(post("/good", b"1") + b"NOT HTTP AT ALL\r\n\r\n")
    assert json.loads((await read_answer(reader))[2])["path"] == "/good"
    assert (await read_answer(reader))[0] == 400
    writer.close()


async def test_an_h2c_upgrade_is_answered_as_http_1_1_with_its_body(served) -> None:
    _, _handler, port = await served()
    reader, writer = await connect(port)
    upgrade = "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
    writer.write(post("/u", b'{"p":1}', upgrade) + post("/next", b"2"))
    status, _, body = await read_answer(reader)
    assert status == 200
    assert json.loads(body)["body"] == '{"p":1}'
    assert json.loads((await read_answer(reader))[2])["body"] == "2"
    writer.close()


async def test_http_1_0_absolute_urls_queries_and_head(served) -> None:
    _, _handler, port = await served()
    reader, writer = await connect(port)
    writer.write(b"GET /old?x=1 HTTP/1.0\r\n\r\n")
    _status, headers, body = await read_answer(reader)
    assert json.loads(body) == {"method": "GET", "path": "/old", "body": "", "version": "1.0"}
    assert headers["connection"] == "close"
    reader, writer = await connect(port)
    writer.write(
        b"POST http://router:8080/v1/x?y=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nHEAD /h HTTP/1.1\r\n\r\n"
    )
    assert json.loads((await read_answer(reader))[2])["path"] == "/v1/x"
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert length > 0  # the length a GET would have
    writer.write(post("/after-head", b""))
    assert json.loads((await read_answer(reader))[2])["path"] == "/after-head"  # no body followed the HEAD
    writer.close()


@pytest.mark.parametrize("how", ["close", "half-close"])
async def test_a_client_that_leaves_cancels_its_handler(served, how: str) -> None:
    _, handler, port = await served()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hang(request: Request) -> Answer:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Response()

    handler.scripts["/hang"] = hang
    reader, writer = await connect(port)
    writer.write(post("/hang", b""))
    await asyncio.wait_for(started.wait(), 10)
    if how == "close":
        writer.close()
    else:  # done sending, still reading: HTTP clients do this when they give up (aiohttp's server agrees)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 10) == b""
    await asyncio.wait_for(cancelled.wait(), 10)


async def test_a_slow_reader_makes_the_stream_wait_instead_of_buffering(served) -> None:
    server, handler, port = await served()
    written = 0
    total = 64 * 1024 * 1024
    piece = b"x" * 65536

    async def flood(request: Request) -> Answer:
        nonlocal written
        out = StreamResponse(200)
        await out.prepare(request)
        while written < total:
            await out.write(piece)
            written += len(piece)
        await out.write_eof()
        return out

    handler.scripts["/flood"] = flood
    reader, writer = await connect(port)
    writer.write(post("/flood", b""))
    conn = None
    for _ in range(500):  # until the server's socket buffer is full and the handler waits on it
        conn = next(iter(server.connections))
        if conn._writing_paused and conn._drain is not None:
            break
        await asyncio.sleep(0.01)
    assert conn is not None
    assert conn._writing_paused
    assert conn._drain is not None
    assert written < total  # it waits for the client instead of buffering the whole answer
    status, _headers, body = await read_answer(reader)  # reading lets it finish
    assert status == 200
    assert len(body) == total
    assert written == total
    writer.close()


async def test_idle_connections_are_closed(served) -> None:
    _, _handler, port = await served(keepalive_timeout=0.1)
    reader, writer = await connect(port)
    writer.write(post("/once", b""))
    await read_answer(reader)
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server once idle
    writer.close()


async def test_close_lets_a_request_in_flight_finish_and_refuses_new_ones(served) -> None:
    server, handler, port = await served()
    release = asyncio.Event()

    async def busy(request: Request) -> Answer:
        await release.wait()
        return Response(200, b"done")

    handler.scripts["/busy"] = busy
    reader, writer = await connect(port)
    writer.write(post("/busy", b""))
    await asyncio.sleep(0.05)
    closing = asyncio.ensure_future(server.close(10.0))
    await asyncio.sleep(0.05)
    with pytest.raises(ConnectionRefusedError):
        await connect(port)
    release.set()
    status, headers, body = await read_answer(reader)
    assert (status, body, headers["connection"]) == (200, b"done", "close")
    await closing
    writer.close()


async def test_a_header_value_with_a_line_break_is_never_written(served) -> None:
    # render_head refuses it (tests/router/test_exchange.py); the server answers 500 instead
    _, handler, port = await served()

    async def injected(request: Request) -> Answer:
        return Response(200, b"", {"X-Member": "a\r\nSet-Cookie: x=1"})

    handler.scripts["/inject"] = injected
    reader, writer = await connect(port)
    writer.write(post("/inject", b""))
    status, headers, _body = await read_answer(reader)
    assert status == 500
    assert "set-cookie" not in headers
    writer.close()


async def test_the_access_log_has_one_line_per_request(caplog) -> None:
    handler = Scripted()
    server = HttpServer(handler, ServerLimits(max_body_bytes=100), logging.getLogger("test.access"))
    port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await connect(port)
        with caplog.at_level(logging.INFO, logger="test.access"):
            writer.write(post("/logged", b"abc"))
            await read_answer(reader)
        assert [r.getMessage() for r in caplog.records if r.name == "test.access"] == [
            f'127.0.0.1 "POST /logged HTTP/1.1" 200 {len(json.dumps(handler_echo("POST", "/logged", "abc")))}'
        ]
        writer.close()
    finally:
        await server.close(0.1)


def handler_echo(method: str, path: str, body: str) -> dict[str, str]:
    return {"method": method, "path": path, "body": body, "version": "1.1"}


async def test_a_closed_connection_is_freed_without_the_cyclic_collector(served) -> None:
    """Parser and protocol refer to each other; the cycle is broken when the connection closes, so
    clients that connect for one request each leave nothing for the collector."""
    server, _handler, port = await served()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(10):
            reader, writer = await connect(port)
            writer.write(b"GET /once HTTP/1.0\r\n\r\n")
            await read_answer(reader)
            writer.close()
            await writer.wait_closed()
        for _ in range(100):
            if not server.connections:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        gc.collect()
        leaked = [o for o in gc.garbage if isinstance(o, HttpConnection)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not server.connections
    assert leaked == []
