"""The benchmark's bare-protocol engine speaks enough HTTP/1.1 for wrk, our router and peers."""

from __future__ import annotations

import asyncio
import json

from prefixroute.bench.router_cost.backend import STREAM_EVENTS


async def test_answers_through_the_router(fast_engine, start_router, client) -> None:
    router = await start_router([fast_engine])
    r = await client.post(router.url + "/v1/completions", json={"prompt": "x"})
    assert r.status == 200
    assert (await r.json())["object"] == "text_completion"
    async with client.post(
        router.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "stream": True}
    ) as r:
        body = await r.read()
    assert body.count(b"data: ") == STREAM_EVENTS + 1
    assert body.endswith(b"data: [DONE]\n\n")
    for path in ("/health", "/get_model_info", "/get_server_info", "/v1/models"):
        assert (await client.get(fast_engine + path)).status == 200


async def test_keeps_requests_apart_on_one_connection(fast_engine) -> None:
    host, port = fast_engine.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b'{"prompt": "x"}'
    one = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    writer.write(one + one[:10])
    writer.write(one[10:])
    await writer.drain()
    answers = []
    for _ in range(2):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        answers.append(json.loads(await reader.readexactly(length)))
    assert [a["object"] for a in answers] == ["text_completion"] * 2
    writer.close()


async def test_reads_a_chunked_body_as_one_request(fast_engine) -> None:
    # Envoy's ext_proc in FULL_DUPLEX_STREAMED mode sends every body chunked: a backend that
    # took the chunks for a next request answered a stray 404 that a later request received.
    host, port = fast_engine.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))

    def chunked(body: bytes) -> bytes:
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head + b"%x;ext=1\r\n%s\r\n%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (
            10,
            body[:10],
            len(body) - 10,
            body[10:],
        )

    async def answer() -> tuple[bytes, bytes]:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return head, await asyncio.wait_for(reader.readexactly(length), 10)

    whole = chunked(b'{"prompt": "x"}')
    models = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    for cut in (5, 80, len(whole) - 3):  # the message split anywhere, the next request right after it
        writer.write(whole[:cut])
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(whole[cut:] + models)
        head, body = await answer()
        assert head.startswith(b"HTTP/1.1 200")
        assert json.loads(body)["object"] == "text_completion"
        head, body = await answer()
        assert head.startswith(b"HTTP/1.1 200")
        assert json.loads(body)["object"] == "list"  # not a stray 404
    writer.write(chunked(b'{"prompt": "x", "stream": true}'))  # the body is read: the stream is asked for
    stream = await asyncio.wait_for(reader.readuntil(b"\r\n0\r\n\r\n"), 10)
    assert stream.startswith(b"HTTP/1.1 200")
    assert b"data: [DONE]" in stream
    writer.close()
