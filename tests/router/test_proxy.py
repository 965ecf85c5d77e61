"""Forwarding through real sockets: byte-exact relay, failover, ejection, mid-stream failures, salts."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from prefixroute.front.gate import GateSettings
from prefixroute.front.tenant import cache_salt, tenant_of
from prefixroute.router.proxy import MEMBER_HEADER
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from tests.router.backend import black_hole, chat_sse_chunks, sse_chunks

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


class Clock:
    """A clock the test moves by hand (ejection periods without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_streaming_relay_is_byte_exact(engines, start_router, client) -> None:
    (engine,) = await engines(1, chunk_delay=0.01)
    router = await start_router([engine.url])
    async with client.post(router.url + "/v1/completions", json={"prompt": PROMPT, "stream": True}) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/event-stream"
        received = [chunk async for chunk in r.content.iter_any()]
    assert b"".join(received) == b"".join(sse_chunks(engine.name))
    # relayed as it arrived: more than one read, not one buffered blob
    assert len(received) > 1


async def test_chat_stream_and_plain_bodies_are_byte_exact(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url])
    body = {"messages": [{"role": "user", "content": PROMPT}], "stream": True}
    async with client.post(router.url + "/v1/chat/completions", json=body) as r:
        assert await r.read() == b"".join(chat_sse_chunks(engine.name))
    direct = await client.post(engine.url + "/v1/chat/completions", json={"messages": body["messages"]})
    via = await client.post(router.url + "/v1/chat/completions", json={"messages": body["messages"]})
    assert await via.read() == await direct.read()
    assert via.headers["X-Engine"] == engine.name  # engine headers pass through
    assert via.headers[MEMBER_HEADER] == engine.url


async def test_original_bytes_are_forwarded_untouched(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url])
    raw = b'{ "prompt" : "caf\\u00e9   au lait",\n "max_tokens": 3, "extra": [1, 2.50] }'
    r = await client.post(router.url + "/v1/completions", data=raw, headers={"Content-Type": "application/json"})
    assert r.status == 200
    assert engine.raw_bodies[-1] == raw


async def test_killed_backend_loses_no_non_streamed_request(engines, start_router, client) -> None:
    a, b = await engines(2)
    router = await start_router([a.url, b.url])
    prompts = [f"request {i} " + PROMPT for i in range(40)]
    await a.stop()  # a is dead: connections are refused
    results = await asyncio.gather(*(client.post(router.url + "/v1/completions", json={"prompt": p}) for p in prompts))
    assert [r.status for r in results] == [200] * len(prompts)
    assert len(b.received) == len(prompts)
    assert router.state.ejections.excluded(router.state.clock()) == {a.url}


async def test_5xx_before_first_byte_moves_to_the_next_member(engines, start_router, client) -> None:
    bad, good = await engines(2)
    bad.behaviour.status = 503
    # An ejection longer than any stall of a loaded test machine: the count below is exact.
    router = await start_router([bad.url, good.url], eject_seconds=60.0, eject_max_seconds=60.0)
    for i in range(10):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"})
        assert r.status == 200
        assert r.headers[MEMBER_HEADER] == good.url
    assert len(bad.received) == 1  # tried once, then ejected


async def test_dropped_connection_before_answer_is_retried(engines, start_router, client) -> None:
    flaky, good = await engines(2)
    flaky.behaviour.drop_before_answer = True
    router = await start_router([flaky.url, good.url])
    for i in range(6):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"})
        assert r.status == 200


async def test_a_black_holed_member_is_ejected_after_one_connect_timeout_and_nothing_fails(
    engines, start_router, client
) -> None:
    # A node that died without resets: its pod IP drops every SYN until Kubernetes removes the
    # endpoints. A connect timeout means nothing was sent: the request moves, the member goes.
    (good,) = await engines(1)
    with black_hole() as dead:
        router = await start_router(
            [dead, good.url],
            routing=RoutingConfig(strategy="round-robin"),
            connect_timeout=0.5,
            eject_seconds=60.0,  # longer than any stall of a loaded test machine: the counts below are exact
            eject_max_seconds=60.0,
        )
        results = [
            await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"}) for i in range(20)
        ]
    assert [r.status for r in results] == [200] * 20
    assert len(good.received) == 20
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert f'prefixroute_router_ejections_total{{member="{dead}"}} 1.0' in metrics  # after the first, never again
    assert 'prefixroute_router_retries_total{reason="connection"} 1.0' in metrics


async def test_a_black_hole_alone_is_a_504_after_the_connect_timeout(engines, start_router, client) -> None:
    with black_hole() as dead:
        router = await start_router([dead], connect_timeout=0.3)
        r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    assert r.status == 504
    error = (await r.json())["error"]
    assert error["type"] == "upstream_timeout"
    assert dead in error["message"]


async def test_every_member_failing_gives_the_last_error(engines, start_router, client) -> None:
    a, b = await engines(2, status=500)
    router = await start_router([a.url, b.url], retries=1)
    r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    # the engine's own 5xx is relayed when nothing better is left
    assert r.status == 500
    assert (await r.json())["error"]["type"] == "server_error"
    assert len(a.received) + len(b.received) == 2


async def test_all_refused_is_502_json(engines, start_router, client) -> None:
    (a,) = await engines(1)
    router = await start_router([a.url])
    await a.stop()
    r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    assert r.status == 502
    assert (await r.json())["error"]["type"] == "upstream_error"


async def test_ejection_and_readmission(engines, start_router, client) -> None:
    a, b = await engines(2)
    clock = Clock()
    router = await start_router([a.url, b.url], clock=clock, eject_seconds=5.0)
    port = a.port
    await a.stop()
    for i in range(8):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"})
        assert r.status == 200
    assert router.state.ejections.excluded(clock()) == {a.url}
    await a.start(port)  # back on the same address, but still ejected
    for i in range(8):
        await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"})
    assert a.received == []
    ready = await (await client.get(router.url + "/ready")).json()
    assert ready["members"] == 1
    clock.now += 5.0  # the ejection period is over
    for i in range(20):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"again {i} {PROMPT}"})
        assert r.status == 200
    assert a.received, "re-admitted member gets traffic again"
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert f'prefixroute_router_ejections_total{{member="{a.url}"}} 1.0' in metrics


async def test_second_failure_doubles_the_ejection(engines, start_router, client) -> None:
    a, b = await engines(2)
    clock = Clock()
    router = await start_router([a.url, b.url], clock=clock, eject_seconds=5.0)
    await a.stop()
    state = router.state
    state.failed(state.fleet.by_name[a.url])
    clock.now += 5.0
    state.failed(state.fleet.by_name[a.url])
    clock.now += 9.0
    assert state.ejections.excluded(clock()) == {a.url}
    clock.now += 1.0
    assert state.ejections.excluded(clock()) == frozenset()


async def test_stream_cut_after_first_byte_ends_with_an_sse_error(engines, start_router, client) -> None:
    (engine,) = await engines(1, cut_stream_after=3)
    router = await start_router([engine.url])
    async with client.post(router.url + "/v1/completions", json={"prompt": PROMPT, "stream": True}) as r:
        assert r.status == 200
        body = await r.read()
    sent = b"".join(sse_chunks(engine.name)[:3])
    assert not sent.endswith(b"\n\n")
    complete_events = sent[: sent.rindex(b"\n\n") + 2]  # the half event the engine left is held back
    assert body.startswith(complete_events)
    last_event = body[len(complete_events) :]
    assert last_event.startswith(b"data: ")
    assert last_event.endswith(b"\n\n")
    error = json.loads(last_event[len(b"data: ") :])
    assert set(error["error"]) == {"message", "type", "param", "code"}


async def test_hanging_engine_times_out_with_504(engines, start_router, client) -> None:
    (engine,) = await engines(1, hang=True)
    router = await start_router([engine.url], read_timeout=0.3)
    r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    assert r.status == 504
    assert (await r.json())["error"]["type"] == "upstream_timeout"
    assert len(engine.received) == 1  # a timeout is not retried


async def test_client_leaving_mid_stream_frees_the_member(engines, start_router) -> None:
    (engine,) = await engines(1, chunk_delay=0.2)
    router = await start_router([engine.url])
    async with aiohttp.ClientSession() as session:
        r = await session.post(router.url + "/v1/completions", json={"prompt": PROMPT, "stream": True})
        await r.content.readany()
        r.close()
    for _ in range(300):
        if router.state.load.get(engine.url).in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert router.state.load.get(engine.url).in_flight == 0


async def test_client_leaving_before_the_answer_releases_the_member_at_once(engines, start_router, client) -> None:
    """A non-streamed request whose client leaves while the engine works: the router gives up
    on it there and then (the upstream connection closes, so the engine can stop), not when
    the engine would have answered; the metric counts it as 499."""
    (engine,) = await engines(1, hang=True)
    router = await start_router([engine.url])
    port = int(router.url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"prompt": PROMPT}).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))
    for _ in range(300):
        if engine.received:
            break
        await asyncio.sleep(0.02)
    assert router.state.load.get(engine.url).in_flight == 1
    writer.close()
    for _ in range(300):
        if router.state.load.get(engine.url).in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert router.state.load.get(engine.url).in_flight == 0
    async with client.get(router.url + "/metrics") as r:
        text = await r.text()
    assert (
        f'prefixroute_router_requests_total{{member="{engine.url}",status="499",strategy="prefix-cache"}} 1.0' in text
    )


async def test_tenant_salt_is_added_with_isolation(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    routing = RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True)
    router = await start_router([engine.url], routing=routing, gate=GateSettings(tenant_header="X-Tenant"))
    body = {"prompt": PROMPT, "cache_salt": "chosen-by-client"}
    await client.post(router.url + "/v1/completions", json=body, headers={"X-Tenant": "acme"})
    await client.post(router.url + "/v1/completions", json=body, headers={"Authorization": "Bearer sk-secret"})
    await client.post(router.url + "/v1/completions", json=body)
    salts = [b["cache_salt"] for b in engine.received]
    acme = tenant_of({"X-Tenant": "acme"}, "X-Tenant")
    keyed = tenant_of({"Authorization": "Bearer sk-secret"}, "X-Tenant")
    assert acme is not None
    assert keyed is not None
    assert salts[0] == cache_salt(acme)
    assert salts[1] == cache_salt(keyed)
    assert len(set(salts)) == 3
    assert "chosen-by-client" not in salts
    assert all("sk-secret" not in s and "acme" not in s for s in salts)
    assert engine.received[0]["prompt"] == PROMPT  # the rest of the body is intact


async def test_no_salt_without_isolation(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url], gate=GateSettings(tenant_header="X-Tenant"))
    raw = json.dumps({"prompt": PROMPT}).encode()
    await client.post(router.url + "/v1/completions", data=raw, headers={"X-Tenant": "acme"})
    assert engine.raw_bodies[-1] == raw


async def test_isolated_tenants_are_routed_apart(engines, start_router, client) -> None:
    es = await engines(4)
    routing = RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True)
    router = await start_router([e.url for e in es], routing=routing, gate=GateSettings(tenant_header="X-Tenant"))
    members = set()
    for tenant in "abcdefghijkl":
        r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT}, headers={"X-Tenant": tenant})
        assert r.status == 200
        members.add(r.headers[MEMBER_HEADER])
    ejected = router.state.ejections.excluded(router.state.clock())
    # one shared prompt, yet different tenants hash differently
    assert len(members) > 1, f"all on {members}; ejected: {ejected}"


async def test_same_prefix_sticks_to_one_member(engines, start_router, client) -> None:
    es = await engines(3)
    router = await start_router([e.url for e in es])
    seen = set()
    for i in range(10):
        r = await client.post(router.url + "/v1/completions", json={"prompt": PROMPT + f" question {i}"})
        seen.add(r.headers[MEMBER_HEADER])
    assert len(seen) == 1


async def test_request_headers_pass_through_without_hop_by_hop(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url])
    await client.post(
        router.url + "/v1/completions",
        json={"prompt": PROMPT},
        headers={"Authorization": "Bearer k", "X-Custom": "1", "Proxy-Authorization": "x"},
    )
    seen = engine.headers[-1]
    assert seen["Authorization"] == "Bearer k"
    assert seen["X-Custom"] == "1"
    assert "Proxy-Authorization" not in seen
    await client.post(
        router.url + "/v1/completions",
        json={"prompt": PROMPT},
        headers={"Connection": "keep-alive, X-Hop", "X-Hop": "for the router only", "X-Custom": "2"},
    )
    seen = engine.headers[-1]
    assert "X-Hop" not in seen
    assert seen["X-Custom"] == "2"  # named in Connection: hop-by-hop
    assert seen["Host"] == f"127.0.0.1:{engine.port}"


async def test_models_is_proxied(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url])
    r = await client.get(router.url + "/v1/models")
    assert r.status == 200
    assert (await r.json())["data"][0]["owned_by"] == engine.name


async def test_match_ratio_is_observed_for_prefix_cache(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url])
    for _ in range(3):
        await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert "prefixroute_router_prefix_match_ratio_count 3.0" in metrics
    assert 'prefixroute_router_prefix_match_ratio_bucket{le="0.0"} 1.0' in metrics  # the first was a miss


async def test_in_flight_is_exported_and_returns_to_zero(engines, start_router, client) -> None:
    (engine,) = await engines(1, chunk_delay=0.05)
    router = await start_router([engine.url])
    async with client.post(router.url + "/v1/completions", json={"prompt": PROMPT, "stream": True}) as r:
        await r.content.readany()
        metrics = await (await client.get(router.url + "/metrics")).text()
        assert f'prefixroute_router_in_flight{{member="{engine.url}"}} 1.0' in metrics
        await r.read()
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert f'prefixroute_router_in_flight{{member="{engine.url}"}} 0.0' in metrics
    assert "prefixroute_router_ring_members 1.0" in metrics


async def test_body_cut_short_is_retried_for_non_streamed(engines, start_router, client) -> None:
    broken, good = await engines(2)
    broken.behaviour.cut_body = True
    router = await start_router([broken.url, good.url])
    for i in range(8):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"{i} {PROMPT}"})
        assert r.status == 200
        assert (await r.json())["choices"][0]["text"] == f"from {good.name}"
    assert len(broken.received) == 1


async def test_no_match_ratio_without_a_prefix_index(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    router = await start_router([engine.url], routing=RoutingConfig(strategy="prefix-hash", block_size=16))
    await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    metrics = await (await client.get(router.url + "/metrics")).text()
    assert "prefixroute_router_prefix_match_ratio_count 0.0" in metrics
    assert 'strategy="prefix-hash"' in metrics


async def test_models_skips_a_dead_member(engines, start_router, client) -> None:
    dead, alive = await engines(2)
    router = await start_router([dead.url, alive.url])
    await dead.stop()
    for _ in range(3):
        r = await client.get(router.url + "/v1/models")
        assert r.status == 200
        assert (await r.json())["data"][0]["owned_by"] == alive.name


async def test_prefill_queue_empties_at_the_first_byte_and_at_the_end(engines, start_router, client) -> None:
    """The load view's prefill queue (what prefix-cache weighs) counts a request only
    until its first byte, and nothing is left behind by any kind of answer."""
    (engine,) = await engines(1, chunk_delay=0.2)
    router = await start_router([engine.url])
    load = router.state.load
    async with client.post(router.url + "/v1/completions", json={"prompt": PROMPT, "stream": True}) as r:
        await r.content.readany()  # the first byte has been relayed
        assert load.get(engine.url).in_flight == 1
        assert load.get(engine.url).prefill_units == 0
        await r.read()
    await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})
    for _ in range(100):
        if load.get(engine.url).in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert load.get(engine.url).in_flight == 0
    assert load.get(engine.url).prefill_units == 0


async def test_failed_attempts_leave_no_prefill_behind(engines, start_router, client) -> None:
    dead, alive = await engines(2)
    await dead.stop()
    router = await start_router([dead.url, alive.url])
    for _ in range(4):
        assert (await client.post(router.url + "/v1/completions", json={"prompt": PROMPT})).status == 200
    for member in (dead.url, alive.url):
        assert router.state.load.get(member).prefill_units == 0


async def test_an_adapter_goes_to_its_engines_and_is_a_503_while_none_of_them_is_ready(
    engines, start_router, client
) -> None:
    holder, other = await engines(2)
    router = await start_router([holder.url, other.url])
    router.state.apply_fleet(
        Fleet(
            (
                Member(holder.url, holder.url, adapters=frozenset({"sql"})),
                Member(other.url, other.url, adapters=frozenset()),
                Member("starting", "http://127.0.0.1:9", ready=False, adapters=frozenset({"law"})),
            )
        )
    )
    for i in range(6):
        body = {"model": "sql", "prompt": f"conversation {i} " * 20, "max_tokens": 2}
        r = await client.post(router.url + "/v1/completions", json=body)
        assert r.status == 200
        await r.read()
    assert [b["model"] for b in holder.received] == ["sql"] * 6
    assert other.received == []
    # law is listed, but only by a member not ready yet: retry later, it exists
    r = await client.post(router.url + "/v1/completions", json={"model": "law", "prompt": "hi", "max_tokens": 2})
    assert r.status == 503
    assert int(r.headers["Retry-After"]) >= 1
    error = (await r.json())["error"]
    assert (error["type"], error["code"]) == ("service_unavailable", "no_ready_member")
    assert error["message"] == "no ready model server serves the adapter 'law' now"
    await holder.stop()  # sql's only server fails: ejected, then sql is not ready anywhere
    r = await client.post(router.url + "/v1/completions", json={"model": "sql", "prompt": "hi", "max_tokens": 2})
    assert r.status == 502  # this request's own failure is what it is told
    r = await client.post(router.url + "/v1/completions", json={"model": "sql", "prompt": "hi", "max_tokens": 2})
    assert r.status == 503
    assert "'sql' now" in (await r.json())["error"]["message"]
    assert holder.received[-1]["model"] == "sql"


async def test_models_lists_what_the_fleet_serves_from_real_engine_sims(start_router, client, tmp_path) -> None:
    """Adapters placed on different engines: the router's list is every ready member's, merged
    in vLLM's shape, each member giving only the adapters the ring lists for it."""
    from dataclasses import replace

    from prefixroute.engine_sim.lora import LoraModule, write_adapter_folder
    from prefixroute.engine_sim.server import create_app
    from tests.engine_sim.conftest import FAST
    from tests.router.conftest import serve

    def sim(*names: str) -> object:
        modules = [LoraModule(n, str(write_adapter_folder(tmp_path / n))) for n in names]
        return create_app(replace(FAST, max_loras=2), lora_modules=modules)

    runners, urls = [], []
    for app in (sim("sql", "law"), sim("poems", "unconfirmed")):
        runner, port = await serve(app)  # type: ignore[arg-type]
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        router = await start_router(urls)
        router.state.apply_fleet(
            Fleet(
                (
                    Member("e0", urls[0], adapters=frozenset({"sql", "law"})),
                    Member("e1", urls[1], adapters=frozenset({"poems"})),  # "unconfirmed" not in the ring yet
                    Member("starting", "http://127.0.0.1:9", ready=False, adapters=frozenset({"later"})),
                )
            )
        )
        async with client.get(router.url + "/v1/models") as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("application/json")
            doc = await r.json()
        async with client.get(urls[0] + "/v1/models") as r:  # what one engine-sim (and vLLM) answers
            one = await r.json()
        assert doc["object"] == one["object"] == "list"
        assert [c["id"] for c in doc["data"]] == ["sim-model", "sql", "law", "poems"]
        assert doc["data"][:3] == one["data"]  # each card exactly as an engine gave it
        poems = doc["data"][3]
        assert (poems["parent"], poems["root"]) == ("sim-model", str(tmp_path / "poems"))
        await runners[1].cleanup()  # e1 goes away: its adapters drop out, it is ejected
        async with client.get(router.url + "/v1/models") as r:
            assert r.status == 200
            assert [c["id"] for c in (await r.json())["data"]] == ["sim-model", "sql", "law"]
        assert [m.name for m in router.state.ready_members()] == ["e0"]
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_models_with_no_list_to_merge_relays_an_engine_s_refusal_or_the_failure(
    engines, start_router, client
) -> None:
    refusing, dead = await engines(2, status=401)
    router = await start_router([refusing.url, dead.url])
    await dead.stop()
    async with client.get(router.url + "/v1/models") as r:
        assert r.status == 401  # the engine's own answer, as a single engine would give it
    # A fleet without adapters asks one member: the dead one was not asked, so not ejected yet.
    assert [m.name for m in router.state.ready_members()] == [refusing.url, dead.url]
    await refusing.stop()
    async with client.get(router.url + "/v1/models") as r:
        assert r.status == 502  # no answer from the one member left to ask
        assert (await r.json())["error"]["type"] == "upstream_error"
    async with client.get(router.url + "/v1/models") as r:
        assert r.status == 503  # both ejected now: nothing to ask
        assert (await r.json())["error"]["code"] == "no_ready_member"
        assert "Retry-After" in r.headers
