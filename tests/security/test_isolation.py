"""Tenant isolation proved through a real router and a real engine-sim (processes on 127.0.0.1).

With `--isolate-tenants`, two tenants sending the very same prompt to the very same engine
never share a cached block: each tenant's repeat hits its own blocks, the other tenant's
first request hits nothing, and engine-sim's per-salt counters
(`engine_sim_prefix_cache_hits_by_salt`) show one salt per tenant, none shared and none
empty. A client cannot pick another tenant's salt: the router overrides `cache_salt`.
Their routing keys differ too (with prefix-hash, the same prompts land on other members).
Without isolation the second tenant hits the first one's blocks — the timing side channel
docs/security.md describes — and the keys are equal.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
from prometheus_client.samples import Sample

from prefixroute.bench import prom
from prefixroute.front.tenant import cache_salt, tenant_of
from prefixroute.processes import Child
from tests.faults.procs import Fleet, metrics

PROMPT = "the confidential quarterly figures of tenant A are as follows: " * 40  # ~2.5k tokens
TENANT = "X-Tenant"


async def ask(router: Child, tenant: str, prompt: str, **extra: Any) -> tuple[int, float, str]:
    """(cached tokens the engine reports, seconds until the answer, member)."""
    body = {"model": "sim", "prompt": prompt, "max_tokens": 1, **extra}
    started = time.perf_counter()
    async with (
        aiohttp.ClientSession() as s,
        s.post(router.url + "/v1/completions", json=body, headers={TENANT: tenant}) as r,
    ):
        assert r.status == 200, await r.text()
        answer = await r.json()
    return (
        answer["usage"]["prompt_tokens_details"]["cached_tokens"],
        time.perf_counter() - started,
        r.headers["X-Prefixroute-Member"],
    )


def by_salt(m: list[Sample], name: str) -> dict[str, float]:
    return prom.by_label(m, f"engine_sim_prefix_cache_{name}_by_salt_total", "cache_salt")


async def test_isolated_tenants_never_share_a_cached_block(fleet: Fleet) -> None:
    (engine,) = await fleet.engines(1)
    router = await fleet.router("--tenant-header", TENANT, "--isolate-tenants", backends=[engine])
    a_first, _, _ = await ask(router, "acme", PROMPT)
    a_again, _, _ = await ask(router, "acme", PROMPT)
    b_first, _, _ = await ask(router, "globex", PROMPT)
    b_again, _, _ = await ask(router, "globex", PROMPT)
    assert a_first == 0
    assert a_again > 0  # a tenant's own cache works
    assert b_first == 0
    assert b_again == a_again  # ...and the other tenant's blocks are out of reach

    # Naming the other tenant's salt does not help: the router replaces any cache_salt.
    other = "a different document for acme only " * 40
    await ask(router, "acme", other)
    stolen, _, _ = await ask(router, "globex", other, cache_salt=cache_salt(tenant_of({TENANT: "acme"}, TENANT) or ""))
    assert stolen == 0

    hits, queries = by_salt(await metrics(engine.url), "hits"), by_salt(await metrics(engine.url), "queries")
    salts = {cache_salt(tenant_of({TENANT: t}, TENANT) or "") for t in ("acme", "globex")}
    assert set(queries) == salts  # every request carried its tenant's salt; none went unsalted
    assert set(hits.values()) == {float(a_again)}  # each tenant hit exactly its own repeat
    assert not any(t in salt for t in ("acme", "globex") for salt in queries)  # salts are not names


async def test_without_isolation_a_tenant_hits_another_tenants_prompt(fleet: Fleet) -> None:
    (engine,) = await fleet.engines(1)
    router = await fleet.router("--tenant-header", TENANT, backends=[engine])
    fresh = "an unrelated prompt nobody sent before " * 60
    _, cold, _ = await ask(router, "globex", fresh)  # what an uncached prompt of this size costs
    await ask(router, "acme", PROMPT)
    b_first, warm, _ = await ask(router, "globex", PROMPT)
    assert b_first > 0  # globex is served from acme's blocks: the side channel
    assert by_salt(await metrics(engine.url), "hits") == {"": float(b_first)}
    print(
        f"\n    isolation off: globex's first request for acme's prompt found {b_first} cached tokens and "
        f"took {warm * 1000:.0f} ms; an uncached prompt of the same size took {cold * 1000:.0f} ms"
    )


async def test_isolated_tenants_have_different_routing_keys(fleet: Fleet) -> None:
    engines = await fleet.engines(4)
    prompts = [f"shared system prompt number {i} " * 20 for i in range(24)]
    isolated = await fleet.router(
        "--strategy", "prefix-hash", "--tenant-header", TENANT, "--isolate-tenants", backends=engines
    )
    plain = await fleet.router("--strategy", "prefix-hash", "--tenant-header", TENANT, backends=engines)
    for router, same in ((isolated, False), (plain, True)):
        a = [(await ask(router, "acme", p))[2] for p in prompts]
        b = [(await ask(router, "globex", p))[2] for p in prompts]
        assert (a == b) is same, (a, b)
