"""The router's front door through a real router and fake engines: API keys, limits, fair sharing."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import aiohttp
import pytest

from prefixroute.front.gate import OBJECTIVE_HEADER, GateSettings, parse_networks
from prefixroute.front.tenant import cache_salt, named_tenant
from prefixroute.routing.config import RoutingConfig
from prefixroute.tenancy.keys import key_digest

BODY = {"model": "m", "prompt": "a prompt long enough to hash into a few blocks of sixteen characters"}


def keyfile(path: Path, entries: list[dict]) -> str:
    path.write_text(json.dumps(entries))  # JSON is YAML
    return str(path)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def post(client: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None, body=None):
    async with client.post(url + "/v1/completions", json=body or BODY, headers=headers or {}) as r:
        return r.status, dict(r.headers), await r.json()


@pytest.fixture
def acme_keys(tmp_path: Path) -> str:
    return keyfile(
        tmp_path / "keys.yaml",
        [
            {"sha256": key_digest("sk-acme"), "tenant": "acme"},
            {"sha256": key_digest("sk-globex"), "tenant": "globex", "maxConcurrent": 1},
        ],
    )


async def test_a_missing_or_unknown_key_is_a_401_and_reaches_no_engine(engines, start_router, client, acme_keys):
    [engine] = await engines(1)
    router = await start_router([engine.url], gate=GateSettings(api_keys=acme_keys))
    for headers in ({}, bearer("sk-wrong"), {"Authorization": "Basic c2stYWNtZQ=="}):
        status, got, body = await post(client, router.url, headers)
        assert status == 401
        assert body["error"]["code"] == "invalid_api_key"
        assert body["error"]["type"] == "invalid_request_error"
        assert got["WWW-Authenticate"].startswith("Bearer")
    async with client.get(router.url + "/v1/models") as r:
        assert r.status == 401
    assert engine.received == []


async def test_a_known_key_names_the_tenant_and_stays_at_the_router(engines, start_router, client, acme_keys):
    [engine] = await engines(1)
    routing = RoutingConfig(block_size=16, prefix_blocks=2, isolate_tenants=True)
    router = await start_router(
        [engine.url], routing=routing, gate=GateSettings(api_keys=acme_keys, tenant_header="X-Tenant")
    )
    # the tenant header is not trusted here: acme's key decides, whatever the header says
    headers = {**bearer("sk-acme"), "X-Tenant": "globex"}
    status, _, _ = await post(client, router.url, headers, {**BODY, "cache_salt": cache_salt(named_tenant("globex"))})
    assert status == 200
    forwarded = engine.headers[-1]
    assert "Authorization" not in forwarded
    assert "authorization" not in {k.lower() for k in forwarded}
    assert engine.received[-1]["cache_salt"] == cache_salt(named_tenant("acme"))  # never the salt the client named


async def test_a_trusted_front_names_the_tenant_without_a_key(engines, start_router, client, acme_keys):
    [engine] = await engines(1)
    trusted = GateSettings(api_keys=acme_keys, tenant_header="X-Tenant", trusted_fronts=parse_networks("127.0.0.0/8"))
    router = await start_router([engine.url], gate=trusted)
    assert (await post(client, router.url, {"X-Tenant": "initech"}))[0] == 200
    untrusted = GateSettings(api_keys=acme_keys, tenant_header="X-Tenant", trusted_fronts=parse_networks("10.0.0.0/8"))
    router = await start_router([engine.url], gate=untrusted)
    assert (await post(client, router.url, {"X-Tenant": "initech"}))[0] == 401


async def test_over_the_concurrency_limit_is_a_429_with_retry_after(engines, start_router, client, acme_keys):
    [engine] = await engines(1, answer_delay=0.5)
    router = await start_router([engine.url], gate=GateSettings(api_keys=acme_keys))
    first = asyncio.ensure_future(post(client, router.url, bearer("sk-globex")))
    await asyncio.sleep(0.2)
    status, headers, body = await post(client, router.url, bearer("sk-globex"))
    assert status == 429
    assert body["error"]["type"] == "requests"
    assert body["error"]["code"] == "rate_limit_exceeded"
    assert int(headers["Retry-After"]) >= 1
    assert (await post(client, router.url, bearer("sk-acme")))[0] == 200  # another tenant is not limited
    assert (await first)[0] == 200
    assert (await post(client, router.url, bearer("sk-globex")))[0] == 200  # the slot came back


async def test_over_the_prompt_budget_is_a_429_naming_tokens(engines, start_router, client, tmp_path):
    [engine] = await engines(1)
    keys = keyfile(tmp_path / "k.yaml", [{"sha256": key_digest("sk-1"), "tenant": "t", "tokensPerMinute": 100}])
    router = await start_router([engine.url], gate=GateSettings(api_keys=keys))
    assert (await post(client, router.url, bearer("sk-1")))[0] == 200  # 70 characters of 100
    status, headers, body = await post(client, router.url, bearer("sk-1"))
    assert status == 429
    assert body["error"]["type"] == "tokens"
    assert int(headers["Retry-After"]) >= 1


async def test_keys_reload_when_the_file_changes_and_a_bad_file_keeps_the_last_good_keys(
    engines, start_router, client, tmp_path
):
    [engine] = await engines(1)
    path = tmp_path / "keys.yaml"
    keyfile(path, [{"sha256": key_digest("sk-old"), "tenant": "t"}])
    router = await start_router([engine.url], gate=GateSettings(api_keys=str(path), api_keys_poll_interval=0.05))
    assert (await post(client, router.url, bearer("sk-old")))[0] == 200
    keyfile(path, [{"sha256": key_digest("sk-new"), "tenant": "t"}])
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    deadline = time.monotonic() + 5
    while (await post(client, router.url, bearer("sk-new")))[0] != 200:
        assert time.monotonic() < deadline, "the new key never took effect"
        await asyncio.sleep(0.05)
    assert (await post(client, router.url, bearer("sk-old")))[0] == 401
    path.write_text("- {sha256: not-a-digest, tenant: t}\n")
    await asyncio.sleep(0.3)
    assert (await post(client, router.url, bearer("sk-new")))[0] == 200
    async with client.get(router.url + "/metrics") as r:
        text = await r.text()
    assert "prefixroute_router_api_keys_reload_errors_total 1.0" in text
    assert "prefixroute_router_api_keys 1.0" in text
    assert "sk-new" not in text
    assert key_digest("sk-new") not in text


async def test_a_bad_key_file_stops_the_router_from_starting(tmp_path):
    from prefixroute.router.app import build_app
    from prefixroute.router.settings import RouterSettings
    from prefixroute.tenancy.keys import KeyFileError

    path = tmp_path / "keys.yaml"
    path.write_text("- {sha256: abc, tenant: t}\n")
    with pytest.raises(KeyFileError, match="entry 1: 'sha256'"):
        build_app(RouterSettings(backends=("http://127.0.0.1:9",), gate=GateSettings(api_keys=str(path))))


async def test_while_engines_are_full_a_quiet_tenant_goes_before_a_noisy_backlog(engines, start_router, client):
    [engine] = await engines(1, answer_delay=0.3)
    gate = GateSettings(tenant_header="X-Tenant", max_in_flight_per_member=1)
    router = await start_router([engine.url], gate=gate)

    async def send(tenant: str, i: int) -> int:
        body = {**BODY, "prompt": f"{tenant} request {i} " * 4}
        return (await post(client, router.url, {"X-Tenant": tenant}, body))[0]

    noisy = [asyncio.ensure_future(send("noisy", i)) for i in range(4)]
    await asyncio.sleep(0.1)  # the first noisy request holds the engine; three wait at the router
    quiet = asyncio.ensure_future(send("quiet", 0))
    assert await asyncio.gather(quiet, *noisy) == [200] * 5
    order = [body["prompt"].split()[0] for body in engine.received]
    assert order == ["noisy", "quiet", "noisy", "noisy", "noisy"]


async def test_a_full_waiting_room_and_a_long_wait_are_503s_with_retry_after(engines, start_router, client):
    [engine] = await engines(1, answer_delay=0.6)
    gate = GateSettings(tenant_header="X-Tenant", max_in_flight_per_member=1, max_waiting=1, max_wait_seconds=0.2)
    router = await start_router([engine.url], gate=gate)
    busy = asyncio.ensure_future(post(client, router.url, {"X-Tenant": "a"}))
    await asyncio.sleep(0.1)
    waiting = asyncio.ensure_future(post(client, router.url, {"X-Tenant": "b"}))
    await asyncio.sleep(0.05)
    status, headers, body = await post(client, router.url, {"X-Tenant": "c"})  # the waiting room is full
    assert status == 503
    assert body["error"]["code"] == "overloaded"
    assert "Retry-After" in headers
    status, _, body = await waiting  # waited 0.2 s, the engine still busy
    assert status == 503
    assert "stayed busy" in body["error"]["message"]
    assert (await busy)[0] == 200
    async with client.get(router.url + "/metrics") as r:
        text = await r.text()
    assert 'prefixroute_router_rejected_total{reason="overloaded"} 2.0' in text


async def test_priority_bands_through_the_router(engines, start_router, client):
    """While the engine is full: sheddable work is refused at once, naming why; the interactive
    band waits and goes before the standard one."""
    [engine] = await engines(1, answer_delay=0.3)
    gate = GateSettings(tenant_header="X-Tenant", max_in_flight_per_member=1, objective_priorities="chat=10,batch=-1")
    router = await start_router([engine.url], gate=gate)

    async def send(tenant: str, objective: str):
        body = {**BODY, "prompt": f"{tenant} request " * 4}
        return await post(client, router.url, {"X-Tenant": tenant, OBJECTIVE_HEADER: objective}, body)

    busy = asyncio.ensure_future(send("first", "standard"))
    await asyncio.sleep(0.1)
    standard = asyncio.ensure_future(send("standard", "standard"))
    await asyncio.sleep(0.05)
    chat = asyncio.ensure_future(send("chat", "chat"))
    status, headers, body = await send("batch", "batch")
    assert status == 503
    assert headers["X-Prefixroute-Shed-Reason"] == "sheddable"
    assert "Retry-After" in headers
    assert body["error"]["code"] == "overloaded"
    assert [r[0] for r in await asyncio.gather(busy, standard, chat)] == [200] * 3
    assert [b["prompt"].split()[0] for b in engine.received] == ["first", "chat", "standard"]
    async with client.get(router.url + "/metrics") as r:
        text = await r.text()
    assert 'prefixroute_router_priority_shed_total{priority="-1",reason="sheddable"} 1.0' in text
    assert 'prefixroute_router_priority_admitted_total{priority="10"} 1.0' in text
