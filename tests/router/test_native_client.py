"""The native upstream client against scripted raw servers: framing, reuse, timeouts, failures.

(Every router test also runs with this client; see the `upstream_client` fixture.)
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import AsyncIterator, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.router.native_client import NativeResponse, NativeUpstream
from prefixroute.router.upstream import ConnectFailed, ConnectionLost, MalformedAnswer, ReadTimedOut
from tests.router.backend import black_hole

Script = Callable[[bytes, asyncio.StreamWriter], "asyncio.Future[None] | None"]


class RawServer:
    """Answers each request with the bytes `answer(request)` returns, split as `splits` says."""

    def __init__(self, answer: Callable[[bytes], list[bytes]], close_after: bool = False) -> None:
        self.answer = answer
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                for piece in self.answer(head + body):
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def client() -> AsyncIterator[NativeUpstream]:
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=0.5, keepalive=4.0, limit=8)
    yield upstream
    await upstream.close()


def fixed(body: bytes, extra: bytes = b"") -> Callable[[bytes], list[bytes]]:
    return lambda _: [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    ]


async def test_content_length_answer_and_connection_reuse(client) -> None:
    server = RawServer(fixed(b'{"ok": 1}'))
    url = await server.start()
    for _ in range(3):
        answer = await client.send("POST", url + "/v1/completions", data=b"{}", headers={"X-A": "1"})
        assert (answer.status, answer.content_type, await answer.read()) == (200, "application/json", b'{"ok": 1}')
        answer.release()
    assert server.connections == 1
    request = server.requests[0]
    assert request.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nX-A: 1\r\n" in request
    assert request.endswith(b"Content-Length: 2\r\n\r\n{}")
    server.stop()


@settings(max_examples=30, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=120), max_size=8))
async def test_chunked_body_split_anywhere(cuts: list[int]) -> None:
    events = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    wire = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\nX-Trailer: t\r\n\r\n"
    points = sorted({min(c, len(wire)) for c in cuts} | {0, len(wire)})
    pieces = [wire[a:b] for a, b in itertools.pairwise(points)]
    server = RawServer(lambda _: pieces)
    url = await server.start()
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=2.0, keepalive=4.0, limit=8)
    answer = await upstream.send("POST", url + "/x", data=b"{}", headers={})
    assert answer.content_length is None
    assert answer.content_type == "text/event-stream"
    assert await answer.read() == b"".join(events)
    answer.release()
    again = await upstream.send("POST", url + "/x", data=b"{}", headers={})  # reused after a clean end
    await again.read()
    assert server.connections == 1
    server.stop()
    await upstream.close()


async def test_interim_answers_are_skipped_and_204_has_no_body(client) -> None:
    server = RawServer(lambda _: [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n"])
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    assert answer.status == 204
    assert await answer.read() == b""
    server.stop()


async def test_close_delimited_body(client) -> None:
    server = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\n\r\nall of ", b"it"], close_after=True)
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    assert await answer.read() == b"all of it"
    answer.release()
    server.stop()


async def test_refused_is_a_connection_error(client) -> None:
    server = RawServer(fixed(b""))
    url = await server.start()
    server.stop()
    await asyncio.sleep(0.05)
    with pytest.raises(ConnectFailed) as refused:
        await client.send("POST", url, data=b"{}", headers={})
    assert refused.value.retry_safe
    assert not refused.value.timed_out


async def test_a_black_holed_address_is_a_connect_timeout_safe_to_move() -> None:
    # A listener whose accept queue is full: the kernel drops every further SYN, as a dead
    # node's pod IP does until its endpoints are removed. Nothing is ever sent there.
    short = NativeUpstream(connect_timeout=0.3, read_timeout=5.0, keepalive=4.0, limit=8)
    with black_hole() as url:
        with pytest.raises(ConnectFailed) as failed:
            await short.send("POST", url + "/v1/completions", data=b"{}", headers={})
    assert failed.value.timed_out
    assert failed.value.retry_safe
    assert short.opened == 0  # the slot came back
    await short.close()


async def test_silence_is_a_timeout(client) -> None:
    server = RawServer(lambda _: [])
    url = await server.start()
    with pytest.raises(ReadTimedOut) as silent:
        await client.send("POST", url, data=b"{}", headers={})
    assert not silent.value.retry_safe  # the engine may be working on it
    slow = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"])
    patient = NativeUpstream(connect_timeout=1.0, read_timeout=5.0, keepalive=4.0, limit=8)
    answer = await patient.send("POST", await slow.start(), data=b"{}", headers={})
    answer._read_timeout = 0.3  # only the wait for the missing 7 bytes is short (the head may be slow to come)
    assert await answer.content.readany() == b"abc"
    with pytest.raises(ReadTimedOut):
        await answer.content.readany()
    server.stop()
    slow.stop()
    await patient.close()


async def test_one_sweep_times_out_every_silent_head_and_stops_when_none_is_awaited(client) -> None:
    silent = RawServer(lambda _: [])
    quick = RawServer(fixed(b"{}"))
    silent_url, quick_url = await silent.start(), await quick.start()
    waits = [asyncio.ensure_future(client.send("POST", silent_url, data=b"{}", headers={})) for _ in range(3)]
    answer = await client.send("POST", quick_url, data=b"{}", headers={})  # answered while the others wait
    assert await answer.read() == b"{}"
    answer.release()
    results = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(r, ReadTimedOut) for r in results)
    assert client._heads == {}
    assert client._sweeper is None  # nothing awaited: no timer left armed
    assert client.opened == 1  # the timed-out connections were closed, the answered one kept
    silent.stop()
    quick.stop()


async def test_cut_body_and_malformed_head_are_client_errors(client) -> None:
    cut = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"], close_after=True)
    answer = await client.send("POST", await cut.start(), data=b"{}", headers={})
    with pytest.raises(ConnectionLost):
        await answer.read()
    bad = RawServer(lambda _: [b"SPDY/9 what\r\n\r\n"])
    with pytest.raises(MalformedAnswer):
        await client.send("POST", await bad.start(), data=b"{}", headers={})
    dropped = RawServer(lambda _: [], close_after=True)
    with pytest.raises(ConnectionLost):
        await client.send("POST", await dropped.start(), data=b"{}", headers={})
    for server in (cut, bad, dropped):
        server.stop()


async def test_unread_or_failed_answers_do_not_return_to_the_pool(client) -> None:
    server = RawServer(fixed(b"x" * 10))
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    answer.release()  # body never read: the connection cannot be trusted
    answer = await client.send("POST", url, data=b"{}", headers={})
    await answer.read()
    answer.release()
    assert server.connections == 2
    server.stop()


async def test_idle_connections_expire() -> None:
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=1.0, keepalive=0.05, limit=8)
    server = RawServer(fixed(b"ok"))
    url = await server.start()
    for _ in range(2):
        answer = await upstream.send("POST", url, data=b"{}", headers={})
        await answer.read()
        answer.release()
        await asyncio.sleep(0.1)
    assert server.connections == 2
    server.stop()
    await upstream.close()


async def test_connection_limit_queues_requests() -> None:
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=2.0, keepalive=4.0, limit=2)
    server = RawServer(fixed(b"ok"))
    url = await server.start()

    async def one() -> bytes:
        answer = await upstream.send("POST", url, data=b"{}", headers={})
        data = await answer.read()
        answer.release()
        return data

    assert await asyncio.gather(*(one() for _ in range(10))) == [b"ok"] * 10
    assert server.connections <= 2
    server.stop()
    await upstream.close()


async def test_only_plain_http(client) -> None:
    with pytest.raises(ConnectFailed, match="only http://"):
        await client.send("POST", "https://example.invalid/x", data=b"{}", headers={})


# -- what the parser (httptools) decides: framing, interim answers, trailers, keep-alive ----


async def test_trailers_are_dropped_and_the_connection_reused(client) -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nTrailer: X-Done\r\n\r\n"
        b"5\r\nhello\r\n0\r\nX-Done: yes\r\nX-More: 1\r\n\r\n"
    )
    server = RawServer(lambda _: [wire])
    url = await server.start()
    for _ in range(2):
        answer = await client.send("POST", url, data=b"{}", headers={})
        assert await answer.read() == b"hello"
        assert "X-Done" not in answer.headers
        assert "X-More" not in answer.headers
        answer.release()
    assert server.connections == 1
    server.stop()


async def test_interim_answers_with_headers_do_not_leak_into_the_final_one(client) -> None:
    server = RawServer(
        lambda _: [
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nX-Final: 1\r\nContent-Length: 4\r\n\r\ndone",
        ]
    )
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    assert (answer.status, answer.reason, await answer.read()) == (201, "Created", b"done")
    assert "Link" not in answer.headers
    assert answer.headers["X-Final"] == "1"
    answer.release()
    again = await client.send("POST", url, data=b"{}", headers={})  # the connection is clean after the interim answers
    assert await again.read() == b"done"
    assert server.connections == 1
    server.stop()


async def test_headers_repeat_and_their_whitespace_is_trimmed(client) -> None:
    server = RawServer(fixed(b"{}", b"X-Multi: a\r\nX-Multi:b\r\nX-Pad: \t spaced value \t\r\nx-lower: v\r\n"))
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    assert answer.headers.getall("X-Multi") == ["a", "b"]  # type: ignore[attr-defined]
    assert answer.headers["X-Pad"] == "spaced value"
    assert answer.headers["X-LOWER"] == "v"
    assert answer.content_length == 2
    answer.release()
    server.stop()


async def test_close_delimited_answers_give_their_connection_slot_back() -> None:
    """An answer that ends with the connection must free its place in the pool's limit."""
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=2.0, keepalive=4.0, limit=1)
    server = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\n\r\nuntil close"], close_after=True)
    url = await server.start()
    for _ in range(3):
        answer = await asyncio.wait_for(upstream.send("POST", url, data=b"{}", headers={}), 5)
        assert answer.content_length is None
        assert await answer.read() == b"until close"
        answer.release()
    assert server.connections == 3
    assert upstream.opened == 0
    server.stop()
    await upstream.close()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",  # not chunked: ends with the connection
    ],
)
async def test_answers_that_end_the_connection_are_not_reused(head: bytes) -> None:
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=2.0, keepalive=4.0, limit=8)
    server = RawServer(lambda _: [head + b"ok"], close_after=True)
    url = await server.start()
    for _ in range(2):
        answer = await upstream.send("POST", url, data=b"{}", headers={})
        assert await answer.read() == b"ok"
        answer.release()
    assert server.connections == 2
    server.stop()
    await upstream.close()


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",  # ambiguous framing
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    ],
)
async def test_malformed_heads_are_malformed_answers(client, wire: bytes) -> None:
    server = RawServer(lambda _: [wire])
    url = await server.start()
    with pytest.raises(MalformedAnswer, match="malformed answer"):
        await client.send("POST", url, data=b"{}", headers={})
    for _ in range(100):  # the connection is closed, never pooled: its slot comes back
        if client.opened == 0:
            break
        await asyncio.sleep(0.01)
    assert client.opened == 0
    server.stop()


async def test_a_malformed_chunk_fails_the_body(client) -> None:
    server = RawServer(
        lambda _: [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", b"zz\r\nnot a chunk\r\n"]
    )
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    with pytest.raises(MalformedAnswer, match="malformed answer"):
        await answer.read()
    answer.close()
    server.stop()


async def test_bytes_after_the_end_of_an_answer_close_the_connection(client) -> None:
    server = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n"])
    url = await server.start()
    answer = await client.send("POST", url, data=b"{}", headers={})
    assert await answer.read() == b"ok"  # the answer itself was complete and is delivered
    answer.release()
    answer = await client.send("POST", url, data=b"{}", headers={})  # but its connection was not trusted again
    assert await answer.read() == b"ok"
    answer.release()
    assert server.connections == 2
    server.stop()


async def test_a_slow_reader_pauses_the_connection_and_gets_every_byte() -> None:
    """Flow control: past the high-water mark the client stops reading the socket, so an
    engine's burst waits in the kernel, not in the router's memory."""
    from prefixroute.router import native_client

    body = bytes(range(256)) * (16 * 1024)  # 4 MiB, four times the high-water mark
    server = RawServer(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body])
    url = await server.start()
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=5.0, keepalive=4.0, limit=8)
    answer = await upstream.send("POST", url, data=b"{}", headers={})
    conn = answer._conn
    for _ in range(500):  # until the connection has paused itself (the test never reads meanwhile)
        if conn.paused:
            break
        await asyncio.sleep(0.01)
    assert conn.paused
    buffered = answer._buffered
    for _ in range(20):  # paused: nothing more is taken from the socket
        await asyncio.sleep(0)
    assert answer._buffered == buffered
    assert native_client._HIGH_WATER < buffered < len(body)
    assert await answer.read() == body
    assert not conn.paused
    answer.release()
    again = await upstream.send("POST", url, data=b"{}", headers={})
    assert await again.read() == body  # the connection is reused after a paused body
    again.release()
    assert server.connections == 1
    server.stop()
    await upstream.close()


async def test_a_cancelled_request_closes_its_connection(client) -> None:
    """The caller gave up (its client left): the engine must see the connection close, and the
    connection's place in the pool must come back."""
    server = RawServer(lambda _: [])  # never answers
    url = await server.start()
    waiting = asyncio.ensure_future(client.send("POST", url, data=b"{}", headers={}))
    for _ in range(200):
        if server.requests:
            break
        await asyncio.sleep(0.01)
    assert client.opened == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    for _ in range(200):
        if client.opened == 0:
            break
        await asyncio.sleep(0.01)
    assert client.opened == 0
    server.stop()


async def test_header_bytes_survive_decoding() -> None:
    """Header bytes that are not ASCII come back exactly when encoded as the router's server does."""
    upstream = NativeUpstream(connect_timeout=1.0, read_timeout=2.0, keepalive=4.0, limit=8)
    server = RawServer(fixed(b"{}", b"X-Utf8: caf\xc3\xa9\r\nX-Latin1: caf\xe9\r\n"))
    answer = await upstream.send("POST", await server.start(), data=b"{}", headers={})
    assert answer.headers["X-Utf8"] == "café"
    assert answer.headers["X-Latin1"].encode("utf-8", "surrogateescape") == b"caf\xe9"
    answer.release()
    server.stop()
    await upstream.close()


async def test_an_answer_is_freed_without_the_cyclic_collector(client) -> None:
    """No reference cycle per request: one made the collector run every few hundred requests."""
    server = RawServer(fixed(b'{"ok": 1}'))
    url = await server.start()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(20):
            answer = await client.send("POST", url, data=b"{}", headers={"X-A": "b"})
            await answer.read()
            answer.release()
        del answer
        gc.collect()
        leaked = [o for o in gc.garbage if isinstance(o, NativeResponse)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert leaked == []
    server.stop()
