"""A router process killed and started again rebuilds everything from its ring, with no step
by hand: the same members, the same choices for the same prompts (the ring and the routing
core are deterministic, so a restarted replica agrees with its former self and with its
peers), and a ring that changed while it was down is the one it serves.

Kubernetes mode (`--resource`, the ring from status.ring) is e2e/test_faults.py.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import yaml

from prefixroute.processes import Child
from tests.faults.procs import Fleet

MEMBER = "X-Prefixroute-Member"


def write_ring(path: Path, engines: list[Child], version: str) -> None:
    members = [
        {"pod": f"engine-{p.port}", "address": f"127.0.0.1:{p.port}", "weight": 1.0, "ready": True} for p in engines
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"ring": {"version": version, "members": members}}))
    tmp.rename(path)  # atomic, as a ConfigMap volume update


async def choices(router: Child, prompts: list[str]) -> dict[str, str]:
    out = {}
    async with aiohttp.ClientSession() as session:
        for prompt in prompts:
            async with session.post(
                router.url + "/v1/completions", json={"model": "sim", "prompt": prompt, "max_tokens": 1}
            ) as r:
                assert r.status == 200, await r.text()
                out[prompt] = r.headers[MEMBER]
    return out


async def ready(router: Child) -> dict[str, object]:
    async with aiohttp.ClientSession() as session, session.get(router.url + "/ready") as r:
        assert r.status == 200
        return dict(await r.json())


async def test_a_killed_router_comes_back_with_the_same_ring_and_choices(fleet: Fleet, tmp_path: Path) -> None:
    engines = await fleet.engines(3)
    ring = tmp_path / "ring.yaml"
    write_ring(ring, engines, "v1")
    router = await fleet.router("--strategy", "prefix-hash", "--block-size", "64", ring_file=ring)
    prompts = [f"tenant {i} system prompt " * 12 for i in range(24)]
    before = await choices(router, prompts)
    assert len(set(before.values())) == 3  # every member has prompts: the comparison means something

    router.kill()
    router.start()  # the same command line, nothing else
    await router.wait_http_async("/ready")
    assert await ready(router) == {"status": "ready", "members": 3, "ring_version": "v1"}
    assert await choices(router, prompts) == before

    # The ring changes while the router is down: it comes back serving the new one.
    router.kill()
    write_ring(ring, engines[1:], "v2")
    router.start()
    await router.wait_http_async("/ready")
    assert (await ready(router))["ring_version"] == "v2"
    after = await choices(router, prompts)
    gone = f"engine-{engines[0].port}"
    assert gone not in after.values()
    # consistent hashing: only the prompts of the member that left moved
    assert {p: m for p, m in before.items() if m != gone} == {p: m for p, m in after.items() if before[p] != gone}
