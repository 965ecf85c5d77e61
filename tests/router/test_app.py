"""Every bad input gets its status and an OpenAI-shaped JSON error; nothing crashes the router."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixroute.front.membership.static import StaticSource
from prefixroute.routing.fleet import Fleet

ERROR_KEYS = {"message", "type", "param", "code"}


async def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"].startswith("application/json")
    body = await response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == ERROR_KEYS
    return body["error"]


BAD_BODIES = [
    (b"", None),
    (b"{not json", None),
    (b"\xff\xfe{}", None),  # not UTF-8
    (b'{"prompt": "caf\xe9"}', None),  # Latin-1 inside JSON
    (b"[1, 2, 3]", None),
    (b'"a string"', None),
    (b'{"prompt": "x", "stream": "yes"}', "stream"),
    (b'{"prompt": "x", "model": 7}', "model"),
    (b'{"model": "m"}', "prompt"),
    (b'{"prompt": 12}', "prompt"),
    (b'{"prompt": []}', "prompt"),
    (b'{"prompt": [1, "a"]}', "prompt"),
    (b"[" * 100000 + b"]" * 100000, None),  # deeper than the JSON parser recurses
]

BAD_CHAT_BODIES = [
    (b'{"model": "m"}', "messages"),
    (b'{"messages": "hi"}', "messages"),
    (b'{"messages": []}', "messages"),
    (b'{"messages": [1]}', "messages[0]"),
    (b'{"messages": [{"content": "hi"}]}', "messages[0].role"),
    (b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}', "messages[0].content"),
]


@pytest.fixture
async def router(engines, start_router):
    (engine,) = await engines(1)
    return await start_router([engine.url], max_body_bytes=4096)


@pytest.mark.parametrize(("raw", "param"), BAD_BODIES)
async def test_bad_completion_bodies_are_400(router, client, raw: bytes, param: str | None) -> None:
    r = await client.post(router.url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"})
    error = await error_of(r, 400 if len(raw) <= 4096 else 413)
    if param is not None:
        assert error["param"] == param
    if len(raw) <= 4096:
        assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(("raw", "param"), BAD_CHAT_BODIES)
async def test_bad_chat_bodies_are_400(router, client, raw: bytes, param: str) -> None:
    r = await client.post(router.url + "/v1/chat/completions", data=raw)
    error = await error_of(r, 400)
    assert error["param"] == param


async def test_declared_oversize_body_is_413(router, client) -> None:
    raw = json.dumps({"prompt": "x" * 5000}).encode()
    r = await client.post(router.url + "/v1/completions", data=raw)
    error = await error_of(r, 413)
    assert error["code"] == "request_too_large"


async def test_chunked_oversize_body_is_413(router, client) -> None:
    async def chunks():
        yield b'{"prompt": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    r = await client.post(router.url + "/v1/completions", data=chunks())
    await error_of(r, 413)


async def test_unknown_path_is_404(router, client) -> None:
    for path in ("/v1/embeddings", "/nope", "/v1/completions/extra", "/"):
        await error_of(await client.get(router.url + path), 404)


async def test_wrong_method_is_405(router, client) -> None:
    r = await client.get(router.url + "/v1/chat/completions")
    error = await error_of(r, 405)
    assert r.headers["Allow"] == "POST"
    assert error["code"] == "method_not_allowed"
    await error_of(await client.post(router.url + "/v1/models"), 405)
    await error_of(await client.delete(router.url + "/health"), 405)


async def test_health_ready_metrics(router, client) -> None:
    assert (await client.get(router.url + "/health")).status == 200
    ready = await client.get(router.url + "/ready")
    assert ready.status == 200
    assert (await ready.json())["members"] == 1
    metrics = await client.get(router.url + "/metrics")
    assert metrics.status == 200
    assert "prefixroute_router_ring_members 1.0" in await metrics.text()


async def test_no_member_is_503_with_retry_after(start_router, client) -> None:
    router = await start_router(source=StaticSource([], 16))
    for path in ("/v1/completions", "/v1/chat/completions"):
        body = {"prompt": "x"} if "chat" not in path else {"messages": [{"role": "user", "content": "x"}]}
        r = await client.post(router.url + path, json=body)
        error = await error_of(r, 503)
        assert int(r.headers["Retry-After"]) >= 1
        assert error["code"] == "no_ready_member"
    await error_of(await client.get(router.url + "/ready"), 503)
    await error_of(await client.get(router.url + "/v1/models"), 503)
    assert (await client.get(router.url + "/health")).status == 200


async def test_drained_members_are_not_ready(start_router, client) -> None:
    from prefixroute.routing.fleet import Member

    fleet = Fleet((Member("a", "http://127.0.0.1:9", weight=0.0), Member("b", "http://127.0.0.1:9", ready=False)))

    class Fixed:
        async def start(self, apply):
            apply(fleet)

        async def stop(self):
            return None

    router = await start_router(source=Fixed())
    await error_of(await client.get(router.url + "/ready"), 503)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "prompt": json_values,
        "messages": json_values | st.lists(st.dictionaries(st.sampled_from(["role", "content"]), json_values)),
        "stream": json_values,
        "model": json_values,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=request_like | json_values, path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
async def test_fuzzed_json_never_breaks_the_router(router, client, body: Any, path: str) -> None:
    r = await client.post(router.url + path, data=json.dumps(body).encode())
    if r.status != 200:
        await error_of(r, r.status)
        assert r.status in (400, 413)
    else:
        await r.read()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300))
async def test_fuzzed_bytes_never_break_the_router(router, client, raw: bytes) -> None:
    r = await client.post(router.url + "/v1/chat/completions", data=raw)
    if r.status != 200:
        await error_of(r, r.status)
    assert (await client.get(router.url + "/health")).status == 200


async def test_with_no_member_a_request_is_held_until_one_appears(engines, start_router, client) -> None:
    """A model at zero engines: the request waits; once the ring has a member it is served.
    The held count is on /metrics while it waits (what the autoscaler reads to wake the model)."""
    (engine,) = await engines(1)
    sources: list = []

    class Later:
        async def start(self, apply):
            sources.append(apply)
            apply(Fleet(()))

        async def stop(self):
            return None

    router = await start_router(source=Later(), hold_seconds=30.0)
    pending = asyncio.create_task(client.post(router.url + "/v1/completions", json={"prompt": "wake up"}))
    for _ in range(200):
        metrics = await (await client.get(router.url + "/metrics")).text()
        if "prefixroute_router_held_requests 1.0" in metrics:
            break
        await asyncio.sleep(0.01)
    assert "prefixroute_router_held_requests 1.0" in metrics
    assert not pending.done()
    sources[0](Fleet.from_urls([engine.url]))
    r = await asyncio.wait_for(pending, 10)
    assert r.status == 200
    assert r.headers["X-Prefixroute-Member"] == engine.url
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert "prefixroute_router_held_requests 0.0" in metrics
    assert 'prefixroute_router_holds_total{outcome="served"} 1.0' in metrics


async def test_a_hold_that_runs_out_is_a_503_with_retry_after(start_router, client) -> None:
    class Empty:
        async def start(self, apply):
            apply(Fleet(()))

        async def stop(self):
            return None

    router = await start_router(source=Empty(), hold_seconds=0.2, max_held_requests=1)
    first = asyncio.create_task(client.post(router.url + "/v1/completions", json={"prompt": "x"}))
    await asyncio.sleep(0.05)
    full = await client.post(router.url + "/v1/completions", json={"prompt": "y"})  # the one slot is taken
    error = await error_of(full, 503)
    assert "already wait" in error["message"]
    assert int(full.headers["Retry-After"]) >= 1
    timed_out = await first
    error = await error_of(timed_out, 503)
    assert error["code"] == "no_ready_member"
    assert "within 0.2s" in error["message"]
    assert int(timed_out.headers["Retry-After"]) >= 1
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert 'prefixroute_router_holds_total{outcome="timeout"} 1.0' in metrics
    assert 'prefixroute_router_holds_total{outcome="full"} 1.0' in metrics
