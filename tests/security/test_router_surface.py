"""The router's attack surface, on a real router process: exactly the documented endpoints,
no admin or reload endpoint (so there is none to protect with a token), the engines'
cache-control and admin endpoints never reachable through it, and garbage on its socket
answered with 400 without an error (and a traceback) in its log for each one.
"""

from __future__ import annotations

import asyncio

import aiohttp

from tests.faults.procs import Fleet

DOCUMENTED = {
    "/v1/completions": "POST",
    "/v1/chat/completions": "POST",
    "/v1/models": "GET",
    "/health": "GET",
    "/ready": "GET",
    "/metrics": "GET",
}
# engine endpoints (vLLM, SGLang, engine-sim) and usual admin paths: none may pass the router
PROBED = [
    "/reset_prefix_cache",
    "/flush_cache",
    "/admin",
    "/reload",
    "/debug/pprof/",
    "/config",
    "/v1/admin",
    "/get_server_info",
    "/get_load",
    "/server_info",
    "/version",
    "/v1/load_lora_adapter",
    "/start_profile",
    "/sleep",
    "/wake_up",
    "/collective_rpc",
    "/tokenize",
    "/v1/embeddings",
    "/v1/responses",
    "/ring",
    "/v1/completions/../../reset_prefix_cache",
    "/%2e%2e/flush_cache",
]
GARBAGE = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(40),  # a TLS ClientHello
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\n" + b"X: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /\x00 HTTP/1.1\r\n\r\n",
]


async def test_only_the_documented_endpoints_answer_and_nothing_else_is_forwarded(fleet: Fleet) -> None:
    (engine,) = await fleet.engines(1)
    router = await fleet.router(backends=[engine])
    async with aiohttp.ClientSession() as s:
        for path, method in DOCUMENTED.items():
            body = (
                {
                    "model": "sim",
                    "max_tokens": 1,
                    **({"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}),
                }
                if method == "POST"
                else None
            )
            async with s.request(method, router.url + path, json=body) as r:
                assert r.status == 200, (path, r.status)
        for path in PROBED:
            for method in ("GET", "POST", "PUT", "DELETE"):
                async with s.request(method, router.url + path, json={}) as r:
                    assert r.status == 404, (method, path, r.status)
                    assert "X-Prefixroute-Member" not in r.headers  # not forwarded to any engine
                    assert (await r.json())["error"]["code"] == "not_found"
    engine_log = engine.log.read_text()
    assert "reset" not in engine_log.lower()
    assert "flush" not in engine_log.lower()


async def test_garbage_on_the_socket_is_refused_without_flooding_the_log(fleet: Fleet) -> None:
    (engine,) = await fleet.engines(1)
    router = await fleet.router(backends=[engine])
    before = router.log.read_text()
    for payload in GARBAGE * 20:
        reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
        writer.write(payload)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(200), 10)
        writer.close()
        assert answer == b"" or answer.split(b" ", 2)[1] in (b"400", b"431"), answer
    async with aiohttp.ClientSession() as s, s.get(router.url + "/health") as r:
        assert r.status == 200
    added = router.log.read_text()[len(before) :]
    assert "Error handling request" not in added, added[:2000]
    assert "Traceback" not in added, added[:2000]
