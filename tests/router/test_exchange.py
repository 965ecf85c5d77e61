"""A request and its answer against a fake connection: the body as it arrives (its limit,
100-continue, a client that leaves), the response head, and a streamed answer's framing
(length, chunked, until close) for each kind of request. The same objects on a real socket:
tests/router/test_http_server.py."""

from __future__ import annotations

import asyncio
import json
from email.utils import formatdate
from types import SimpleNamespace

import pytest
from multidict import CIMultiDict

from prefixroute.front import errors
from prefixroute.router import exchange
from prefixroute.router.exchange import Request, Response, StreamResponse, error_answer, render_head


class FakeConnection:
    """What a request and its answer see of a connection: records what is sent and asked."""

    remote = "10.0.0.7"

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.continued = 0
        self.closing = False
        self.aborted = False
        self.drained = 0
        self.room = asyncio.Event()  # cleared: the client reads slower than the answer comes
        self.room.set()

    def continue_body(self) -> None:
        self.continued += 1

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def drain(self) -> None:
        await self.room.wait()
        self.drained += 1

    def closes_after_response(self, request: Request) -> bool:
        return self.closing or not request.keep_alive

    def close_after_response(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.aborted = True


def request(
    conn: FakeConnection,
    *,
    method: str = "POST",
    version: str = "1.1",
    keep_alive: bool = True,
    limit: int = 100,
    **headers: str,
) -> Request:
    fields = CIMultiDict({k.replace("_", "-"): v for k, v in headers.items()})
    return Request(conn, method, "/v1/completions", version, fields, keep_alive, limit)  # type: ignore[arg-type]


def head_of(data: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status line, header lines in order, what follows the head) of bytes sent."""
    head, _, rest = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("utf-8", "surrogateescape").split("\r\n")
    return status, [(n, v) for n, _, v in (line.partition(": ") for line in lines)], rest


# -- the request body ---------------------------------------------------------------------


async def body_of(req: Request, *chunks: bytes, finish: bool = True) -> asyncio.Task[bytes]:
    """A handler's `read` running while `chunks` arrive after it started waiting."""
    task = asyncio.create_task(req.read())
    await asyncio.sleep(0)  # the handler waits for the body
    for chunk in chunks:
        req._feed(chunk)
    if finish:
        req._finish()
    return task


async def test_a_body_arriving_in_pieces_is_read_whole_and_again() -> None:
    req = request(FakeConnection(), Content_Length="9")
    assert req.content_length == 9
    assert req.remote == "10.0.0.7"
    assert not req.body_complete
    task = await body_of(req, b"abc", b"def", b"ghi")
    assert await task == b"abcdefghi"
    assert req.body_complete
    assert await req.read() == b"abcdefghi"  # a second read gives the same body


async def test_an_empty_body_and_one_without_a_length() -> None:
    req = request(FakeConnection())
    assert req.content_length is None
    req._finish()
    assert await req.read() == b""


@pytest.mark.parametrize(("sizes", "refused"), [((100,), False), ((60, 40), False), ((101,), True), ((60, 41), True)])
async def test_the_body_limit_counts_every_byte_that_arrived(sizes: tuple[int, ...], refused: bool) -> None:
    req = request(FakeConnection(), limit=100)
    task = await body_of(req, *(b"x" * n for n in sizes))
    if refused:
        with pytest.raises(errors.PayloadTooLarge, match="larger than 100 bytes"):
            await task
    else:
        assert len(await task) == sum(sizes)


async def test_past_the_limit_the_reader_is_woken_and_the_rest_is_dropped() -> None:
    req = request(FakeConnection(), limit=4)
    task = await body_of(req, b"12345", finish=False)  # no end of body: the error alone wakes it
    with pytest.raises(errors.PayloadTooLarge):
        await asyncio.wait_for(task, 5)
    req._feed(b"more")
    req._finish()
    assert req._chunks == []
    assert req._size == 5  # nothing kept, nothing counted after the refusal
    with pytest.raises(errors.PayloadTooLarge):
        await req.read()


async def test_a_client_that_leaves_mid_body_fails_the_read() -> None:
    req = request(FakeConnection())
    task = await body_of(req, b"abc", finish=False)
    req._fail(ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError, match="gone"):
        await task


async def test_a_failure_after_the_whole_body_arrived_changes_nothing() -> None:
    req = request(FakeConnection())
    req._feed(b"abc")
    req._finish()
    req._fail(ConnectionResetError("gone"))
    assert await req.read() == b"abc"


@pytest.mark.parametrize(
    ("version", "expect", "sent"),
    [("1.1", "100-continue", 1), ("1.1", "100-Continue", 1), ("1.0", "100-continue", 0), ("1.1", "", 0)],
)
async def test_100_continue_is_sent_once_when_the_handler_waits_for_the_body(
    version: str, expect: str, sent: int
) -> None:
    conn = FakeConnection()
    req = request(conn, version=version, Expect=expect) if expect else request(conn, version=version)
    assert req.expect_continue is bool(sent)
    task = asyncio.create_task(req.read())
    await asyncio.sleep(0)
    req._feed(b"a")
    await asyncio.sleep(0)  # the reader is still waiting: no second 100
    req._feed(b"b")
    req._finish()
    assert await task == b"ab"
    assert conn.continued == sent


async def test_no_100_continue_when_the_body_is_already_in() -> None:
    conn = FakeConnection()
    req = request(conn, Expect="100-continue")
    req._feed(b"ab")
    req._finish()
    assert await req.read() == b"ab"
    assert conn.continued == 0


# -- the response head ----------------------------------------------------------------------


def test_the_head_is_the_status_line_the_headers_the_framing_the_date_and_a_blank_line() -> None:
    data = render_head(201, None, {"X-One": "1", "X-Two": "2"}, "Content-Length: 0\r\n")
    status, lines, rest = head_of(data)
    assert status == "HTTP/1.1 201 Created"
    assert rest == b""
    assert data.endswith(b"\r\n\r\n")
    assert [n for n, _ in lines] == ["X-One", "X-Two", "Content-Length", "Date"]
    assert lines[-1][1].endswith(" GMT")


@pytest.mark.parametrize(
    ("status", "reason", "line"),
    [(200, None, "HTTP/1.1 200 OK"), (503, "Busy", "HTTP/1.1 503 Busy"), (599, None, "HTTP/1.1 599 Unknown")],
)
def test_the_status_line_takes_the_reason_given_or_the_standard_one(status: int, reason: str | None, line: str) -> None:
    assert head_of(render_head(status, reason, {}, ""))[0] == line


@pytest.mark.parametrize(
    "headers", [{"X-Member": "a\r\nSet-Cookie: x=1"}, {"X-Member": "a\nb"}, {"X-Member": "a\rb"}, {"X-A\r\nB": "1"}]
)
def test_a_header_with_a_line_break_is_never_written(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        render_head(200, None, headers, "")


def test_a_relayed_header_keeps_its_raw_bytes() -> None:
    # the server decodes headers with surrogate escapes; they go back out as the bytes they were
    value = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")
    assert b"X-Engine: caf\xe9 \xff\r\n" in render_head(200, None, {"X-Engine": value}, "")


def test_the_date_is_rendered_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.2]
    monkeypatch.setattr(exchange, "time", SimpleNamespace(time=lambda: now[0]))
    date = exchange._DateHeader()
    first = date.line()
    assert first == f"Date: {formatdate(1000.2, usegmt=True)}\r\n"
    now[0] = 1000.9
    assert date.line() is first
    now[0] = 1001.0
    assert date.line() == f"Date: {formatdate(1001, usegmt=True)}\r\n"


def test_a_response_takes_its_content_type_and_keeps_multidict_headers() -> None:
    response = Response(200, b"{}", {"X-A": "1"}, content_type="application/json")
    assert (response.headers["x-a"], response.headers["Content-Type"]) == ("1", "application/json")
    multi: CIMultiDict[str] = CIMultiDict([("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
    assert Response(headers=multi).headers is multi  # repeated headers from an engine stay repeated


def test_an_error_becomes_its_status_headers_and_json_body() -> None:
    response = error_answer(errors.NoReadyMember(retry_after=7))
    assert response.status == 503
    assert response.headers["Retry-After"] == "7"
    assert response.headers["Content-Type"] == "application/json"
    assert json.loads(response.body)["error"]["code"] == "no_ready_member"


# -- a streamed answer's framing ------------------------------------------------------------

FRAMINGS = [
    # version, method, status, length, keep-alive: the framing header lines, the body bytes on the wire
    ("1.1", "POST", 200, None, True, ["Transfer-Encoding: chunked"], b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"),
    ("1.1", "POST", 200, 5, True, ["Content-Length: 5"], b"abcde"),
    (
        "1.1",
        "POST",
        200,
        None,
        False,
        ["Transfer-Encoding: chunked", "Connection: close"],
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    ),
    ("1.0", "POST", 200, None, True, ["Connection: close"], b"abcde"),  # ends when the connection does
    ("1.0", "POST", 200, 5, True, ["Content-Length: 5", "Connection: keep-alive"], b"abcde"),
    ("1.0", "POST", 200, 5, False, ["Content-Length: 5", "Connection: close"], b"abcde"),
]


@pytest.mark.parametrize(("version", "method", "status", "length", "keep_alive", "framing", "wire"), FRAMINGS)
async def test_a_stream_is_framed_for_its_client(
    version: str, method: str, status: int, length: int | None, keep_alive: bool, framing: list[str], wire: bytes
) -> None:
    conn = FakeConnection()
    req = request(conn, method=method, version=version, keep_alive=keep_alive)
    answer = StreamResponse(status, headers={"Content-Type": "text/event-stream"})
    answer.content_length = length
    await answer.prepare(req)
    assert answer.prepared
    assert not answer.complete
    for piece in (b"abc", b"", b"de"):  # an empty piece sends nothing (never a chunked body's end)
        await answer.write(piece)
    await answer.write_eof()
    await answer.write_eof()  # the end goes out once
    status_line, lines, rest = head_of(conn.sent[0])
    assert status_line == f"HTTP/1.1 {status} OK"
    assert rest == b""
    assert [f"{n}: {v}" for n, v in lines[1:-1]] == framing
    assert lines[0] == ("Content-Type", "text/event-stream")
    assert b"".join(conn.sent[1:]) == wire
    assert answer.complete
    assert conn.closing is (version == "1.0" and length is None)  # only an unframed body closes the connection


@pytest.mark.parametrize(("method", "status"), [("HEAD", 200), ("POST", 204), ("GET", 304)])
async def test_an_answer_without_a_body_has_no_framing_and_is_complete_at_once(method: str, status: int) -> None:
    conn = FakeConnection()
    answer = StreamResponse(status)
    await answer.prepare(request(conn, method=method))
    assert answer.complete
    assert [n for n, _ in head_of(conn.sent[0])[1]] == ["Date"]
    await answer.write_eof()
    assert len(conn.sent) == 1  # no chunked terminator after a body that has none


async def test_the_head_goes_out_once() -> None:
    conn = FakeConnection()
    req = request(conn)
    answer = StreamResponse(200)
    await answer.prepare(req)
    await answer.prepare(req)
    assert len(conn.sent) == 1


async def test_nothing_is_written_before_the_head() -> None:
    answer = StreamResponse(200)
    with pytest.raises(RuntimeError, match="before prepare"):
        await answer.write(b"x")
    await answer.write_eof()
    answer.abort()
    assert not answer.complete
    assert not answer.prepared


async def test_a_slow_client_makes_each_write_wait() -> None:
    conn = FakeConnection()
    answer = StreamResponse(200)
    await answer.prepare(request(conn))
    conn.room.clear()
    write = asyncio.create_task(answer.write(b"abc"))
    await asyncio.sleep(0)
    assert not write.done()
    assert conn.sent[-1] == b"3\r\nabc\r\n"  # sent, and waiting for the client
    conn.room.set()
    await write
    assert conn.drained == 2  # the head's drain and this write's


async def test_abort_closes_the_connection_mid_answer() -> None:
    conn = FakeConnection()
    answer = StreamResponse(200)
    await answer.prepare(request(conn))
    await answer.write(b"abc")
    answer.abort()
    assert conn.aborted
    assert not answer.complete
