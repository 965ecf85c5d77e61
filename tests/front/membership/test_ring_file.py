"""--ring-file: the status.ring shape in a file, reloaded when it changes, last good kept."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import yaml

from prefixroute.front.membership.ring_file import RingFileSource, load_ring_file
from prefixroute.router.proxy import MEMBER_HEADER
from prefixroute.routing.fleet import Fleet


def ring(*members: tuple[str, str], version: str = "1", **extra: object) -> dict:
    return {
        "version": version,
        "members": [{"pod": p, "address": a, "weight": 1.0, "ready": True, **extra} for p, a in members],
    }


def write(path: Path, doc: object, as_json: bool = False) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc) if as_json else yaml.safe_dump(doc))
    os.replace(tmp, path)  # atomic, like a ConfigMap volume update


def test_bare_and_wrapped_documents(tmp_path: Path) -> None:
    path = tmp_path / "ring.yaml"
    write(path, ring(("pod-a", "10.0.0.1:8000"), version="7"))
    fleet = load_ring_file(str(path), 16)
    assert [m.url for m in fleet.members] == ["http://10.0.0.1:8000"]
    assert fleet.version == "7"
    write(path, {"ring": ring(("pod-a", "http://h:1"))}, as_json=True)
    assert load_ring_file(str(path), 16).members[0].name == "pod-a"


def test_poll_applies_changes_and_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "ring.yaml"
    seen: list[Fleet] = []
    source = RingFileSource(str(path), 16, 1.0)
    source.poll(seen.append)  # missing: nothing applied
    assert seen == []
    write(path, ring(("a", "h:1")))
    source.poll(seen.append)
    source.poll(seen.append)  # unchanged: not applied again
    assert len(seen) == 1
    path.write_text("members: [ {address: }")  # broken YAML
    source.poll(seen.append)
    write(path, {"members": [{"pod": "a"}]})  # no address
    source.poll(seen.append)
    assert len(seen) == 1
    write(path, ring(("a", "h:1"), ("b", "h:2"), version="2"))
    source.poll(seen.append)
    assert [m.name for m in seen[-1].members] == ["a", "b"]


async def test_router_follows_the_file(engines, start_router, client, tmp_path: Path) -> None:
    a, b = await engines(2)
    path = tmp_path / "ring.yaml"
    write(path, ring(("pod-a", f"127.0.0.1:{a.port}")))
    router = await start_router(ring_file=str(path), ring_poll_interval=0.05)
    r = await client.post(router.url + "/v1/completions", json={"prompt": "hello"})
    assert r.headers[MEMBER_HEADER] == "pod-a"
    write(
        path,
        {
            "version": "2",
            "members": [
                {"pod": "pod-a", "address": f"127.0.0.1:{a.port}", "weight": 0, "ready": True},  # draining
                {"pod": "pod-b", "address": f"127.0.0.1:{b.port}", "weight": 1, "ready": True},
            ],
        },
    )
    for _ in range(750):
        if router.state.fleet.version == "2":
            break
        await asyncio.sleep(0.02)
    assert router.state.fleet.version == "2"
    for i in range(5):
        r = await client.post(router.url + "/v1/completions", json={"prompt": f"hello {i}"})
        assert r.headers[MEMBER_HEADER] == "pod-b"
    write(path, {"version": "3", "members": []})
    for _ in range(750):
        if router.state.fleet.version == "3":
            break
        await asyncio.sleep(0.02)
    r = await client.post(router.url + "/v1/completions", json={"prompt": "hello"})
    assert r.status == 503
