"""The front door through a real router process and a real engine-sim (127.0.0.1):

- a tenant cannot use another tenant's cache_salt: with isolation the router replaces any
  salt with the key's tenant's; without it, a salt the caller chose is kept within its tenant
  (engine-sim's per-salt counters and cached-token counts are the evidence);
- a key file edited (replaced by rename, as a Secret volume is) while clients keep calling
  takes effect without a restart and loses no request;
- neither a key nor its SHA-256 digest ever appears in the router's log (DEBUG level, access
  log on, reloads and refusals included) or on its /metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp

from prefixroute.bench import prom
from prefixroute.front.tenant import cache_salt, named_tenant, tenant_scoped_salt
from prefixroute.processes import Child
from prefixroute.tenancy.keys import key_digest
from tests.faults.procs import Fleet, metrics

ACME, GLOBEX, INITECH = "sk-acme-f00d", "sk-globex-beef", "sk-initech-cafe"
PROMPT = "the confidential board minutes of acme, first quarter: " * 40


def write_keys(path: Path, keys: dict[str, str]) -> None:
    """Replace the key file in one rename, as the kubelet swaps a Secret volume's files."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(json.dumps([{"sha256": key_digest(k), "tenant": t} for k, t in keys.items()]))
    os.replace(fresh, path)


async def ask(router: Child, key: str | None, prompt: str = PROMPT, **extra: Any) -> tuple[int, int]:
    """(status, cached prompt tokens the engine reports)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "sim", "prompt": prompt, "max_tokens": 1, **extra}
    async with aiohttp.ClientSession() as s, s.post(router.url + "/v1/completions", json=body, headers=headers) as r:
        answer = await r.json()
        if r.status != 200:
            return r.status, 0
        return r.status, answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def by_salt(samples: Any) -> dict[str, float]:
    return prom.by_label(samples, "engine_sim_prefix_cache_queries_by_salt_total", "cache_salt")


async def test_with_isolation_a_tenant_cannot_name_another_tenants_salt(fleet: Fleet, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write_keys(keys, {ACME: "acme", GLOBEX: "globex"})
    (engine,) = await fleet.engines(1)
    router = await fleet.router("--api-keys", str(keys), "--isolate-tenants", backends=[engine])
    assert (await ask(router, ACME))[0] == 200
    assert (await ask(router, ACME))[1] > 0  # acme's own cache works
    acme_salt = cache_salt(named_tenant("acme"))
    status, stolen = await ask(router, GLOBEX, cache_salt=acme_salt)
    assert status == 200
    assert stolen == 0  # the salt globex named was replaced by its own
    assert set(by_salt(await metrics(engine.url))) == {acme_salt, cache_salt(named_tenant("globex"))}


async def test_without_isolation_a_chosen_salt_stays_within_its_tenant(fleet: Fleet, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write_keys(keys, {ACME: "acme", GLOBEX: "globex"})
    (engine,) = await fleet.engines(1)
    router = await fleet.router("--api-keys", str(keys), backends=[engine])
    chosen = "acme-private-salt"
    await ask(router, ACME, cache_salt=chosen)
    assert (await ask(router, ACME, cache_salt=chosen))[1] > 0  # acme's salted cache works
    status, stolen = await ask(router, GLOBEX, cache_salt=chosen)  # globex knows (or guesses) the salt
    assert status == 200
    assert stolen == 0
    # ... or names the salt isolation would have derived for acme (blocks left from a time it was on)
    assert (await ask(router, GLOBEX, cache_salt=cache_salt(named_tenant("acme"))))[1] == 0
    salts = set(by_salt(await metrics(engine.url)))
    assert chosen not in salts
    assert tenant_scoped_salt(named_tenant("acme"), chosen) in salts
    # unsalted requests still share the cache: that is what isolation off means
    shared = "a system prompt every tenant of this deployment uses " * 30
    await ask(router, ACME, shared)
    assert (await ask(router, GLOBEX, shared))[1] > 0


async def test_a_key_file_replaced_under_load_loses_no_request_and_logs_no_key(fleet: Fleet, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    write_keys(keys, {ACME: "acme", GLOBEX: "globex"})
    (engine,) = await fleet.engines(1)
    router = await fleet.router(
        "--api-keys", str(keys), "--isolate-tenants", "--access-log", "--log-level", "DEBUG", backends=[engine]
    )
    pid = router.pid
    statuses: list[int] = []
    stop, warmed_up = asyncio.Event(), asyncio.Event()  # warmed up: 50 answers in

    async def client(n: int) -> None:
        async with aiohttp.ClientSession() as s:
            i = 0
            while not stop.is_set():
                body = {"model": "sim", "prompt": f"client {n} request {i} " * 20, "max_tokens": 1}
                async with s.post(
                    router.url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {ACME}"}
                ) as r:
                    await r.read()
                    statuses.append(r.status)
                    if len(statuses) >= 50:
                        warmed_up.set()
                i += 1

    clients = [asyncio.create_task(client(n)) for n in range(4)]
    try:
        warm = asyncio.create_task(warmed_up.wait())
        done, _ = await asyncio.wait([warm, *clients], return_when=asyncio.FIRST_COMPLETED)
        assert warm in done, "a client stopped before the first 50 answers"
        for _ in range(3):  # globex out, initech in, and back: each a whole new file
            write_keys(keys, {ACME: "acme", INITECH: "initech"})
            await wait_for(lambda: ask(router, INITECH), 200)
            assert (await ask(router, GLOBEX))[0] == 401
            write_keys(keys, {ACME: "acme", GLOBEX: "globex"})
            await wait_for(lambda: ask(router, GLOBEX), 200)
        keys.write_text("- sha256: not-a-digest\n  tenant: acme\n")  # a bad edit: the last good keys stay
        await asyncio.sleep(2.5)
        assert (await ask(router, GLOBEX))[0] == 200
        await ask(router, "sk-wrong-key")
        await ask(router, None)
    finally:
        stop.set()
        await asyncio.gather(*clients)
    assert len(statuses) > 50, {s: statuses.count(s) for s in set(statuses)}
    assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    assert router.alive()
    assert router.pid == pid  # the same process throughout

    text = router.log.read_text(errors="replace")
    exposition = await fetch_metrics(router)
    assert "API keys: 2 reloaded" in text
    assert "reload_errors" in exposition  # the log and metrics were read
    for key in (ACME, GLOBEX, INITECH, "sk-wrong-key"):
        for where, found in (("log", text), ("metrics", exposition)):
            assert key not in found, (key, where)
            assert key_digest(key) not in found, (key, where)
    assert "acme" not in exposition
    assert "globex" not in exposition  # no tenant name as a label either


async def wait_for(call: Any, status: int, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (await call())[0] != status:
        assert asyncio.get_running_loop().time() < deadline, f"still not {status}"
        await asyncio.sleep(0.1)


async def fetch_metrics(router: Child) -> str:
    async with aiohttp.ClientSession() as s, s.get(router.url + "/metrics") as r:
        return await r.text()
