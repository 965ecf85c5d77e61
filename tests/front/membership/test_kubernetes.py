"""Kubernetes mode: status.ring → Fleet through a fake watch edge (the real API server is e2e's)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import requests

from prefixroute.front.membership.kubernetes import KubernetesSource, fleet_from_resource
from prefixroute.routing.fleet import Fleet


def prm(version: str, *addresses: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "serving", "resourceVersion": version},
        "spec": {"routing": {"strategy": "prefix-cache"}},
        "status": {
            "ring": {
                "version": version,
                "members": [
                    {"pod": f"engine-{i}", "address": a, "weight": 1.0, "ready": ready} for i, a in enumerate(addresses)
                ],
            }
        },
    }


def test_status_ring_to_fleet() -> None:
    fleet = fleet_from_resource(prm("7", "10.0.0.1:8000", "10.0.0.2:8000"), 16)
    assert [m.name for m in fleet.members] == ["engine-0", "engine-1"]
    assert fleet.members[1].url == "http://10.0.0.2:8000"
    assert fleet.version == "7"
    assert fleet_from_resource({"metadata": {}}, 16).members == ()  # no status yet
    assert fleet_from_resource(None, 16).members == ()
    with pytest.raises(ValueError, match="ring member needs an 'address'"):
        fleet_from_resource({"status": {"ring": {"members": [{"pod": "x"}]}}}, 16)


class FakeEdge:
    """Scripted API server: each connection lists `listed`, then plays one batch of watch events."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.closed = threading.Event()

    def list(self) -> tuple[Mapping[str, Any] | None, str]:
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step, "1"

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        events = self.script.pop(0) if self.script else []
        if isinstance(events, Exception):
            raise events
        yield from events
        if not self.script:
            self.closed.wait(5)  # a quiet watch, until the source stops

    def close(self) -> None:
        self.closed.set()


async def wait_for(fleets: list[Fleet], count: int) -> None:
    for _ in range(1500):
        if len(fleets) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {len(fleets)} fleets arrived")


async def test_list_then_watch_follows_the_ring() -> None:
    script: list[Any] = [
        prm("1", "h:1"),
        [
            ("MODIFIED", prm("2", "h:1", "h:2")),
            ("MODIFIED", {**prm("2", "h:1", "h:2"), "spec": {"other": 1}}),  # ring unchanged: skipped
            ("BOOKMARK", {"metadata": {"resourceVersion": "3"}}),
            ("DELETED", prm("2", "h:1", "h:2")),
        ],
    ]
    edge = FakeEdge(script)
    source = KubernetesSource("serving", "llama", 16, edge_factory=lambda: edge)
    fleets: list[Fleet] = []
    await source.start(fleets.append)
    await wait_for(fleets, 3)
    await source.stop()
    assert [len(f.members) for f in fleets] == [1, 2, 0]
    assert fleets[1].version == "2"


async def test_errors_reconnect_with_backoff() -> None:
    script: list[Any] = [
        ConnectionError("api server down"),
        prm("1", "h:1"),
        [("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})],
        prm("5", "h:1", "h:5"),
        RuntimeError("watch broke"),
        prm("6", "h:6"),
        [],
    ]
    edges = 0

    def factory() -> FakeEdge:
        nonlocal edges
        edges += 1
        return FakeEdge(script)

    source = KubernetesSource("serving", "llama", 16, edge_factory=factory, backoff=(0.01, 0.02))
    fleets: list[Fleet] = []
    await source.start(fleets.append)
    await wait_for(fleets, 3)
    await source.stop()
    assert [f.version for f in fleets] == ["1", "5", "6"]
    assert edges >= 4


async def test_malformed_ring_keeps_the_last_fleet() -> None:
    bad = {"status": {"ring": {"version": "x", "members": [{"pod": "p", "weight": -1, "address": "h:1"}]}}}
    script: list[Any] = [prm("1", "h:1"), [("MODIFIED", bad), ("MODIFIED", prm("2", "h:2"))]]
    edge = FakeEdge(script)
    source = KubernetesSource("serving", "llama", 16, edge_factory=lambda: edge)
    fleets: list[Fleet] = []
    await source.start(fleets.append)
    await wait_for(fleets, 2)
    await source.stop()
    assert [f.version for f in fleets] == ["1", "2"]


async def test_router_in_kubernetes_mode_serves_the_watched_ring(engines, start_router, client) -> None:
    (engine,) = await engines(1)
    edge = FakeEdge([prm("1", f"127.0.0.1:{engine.port}"), []])
    source = KubernetesSource("serving", "llama", 16, edge_factory=lambda: edge)
    router = await start_router(resource="serving/llama", source=source)
    for _ in range(1500):
        if router.state.fleet.members:
            break
        await asyncio.sleep(0.01)
    r = await client.post(router.url + "/v1/completions", json={"prompt": "hi"})
    assert r.status == 200
    assert r.headers["X-Prefixroute-Member"] == "engine-0"


def test_real_edge_reads_kubeconfig(tmp_path, monkeypatch) -> None:
    """The pykube edge builds its query from KUBECONFIG without talking to a server."""
    from prefixroute.front.membership.kubernetes import PykubeEdge

    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: default}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    edge = PykubeEdge("serving", "llama")
    url = edge.query._build_api_url()
    assert url.startswith("prefixroutedmodels")
    assert "metadata.name%3Dllama" in url
    with pytest.raises(requests.exceptions.ConnectionError):
        edge.list()  # nothing listens on port 9
    edge.close()


async def test_stop_returns_while_the_real_edge_waits_on_a_quiet_watch(tmp_path, monkeypatch) -> None:
    """A watch that sends nothing holds the reader's lock on the response; closing it must
    not wait for the next byte (up to the read timeout), or the router outlives SIGTERM and
    every router pod takes its whole grace period to end (found by e2e/test_gc.py)."""
    import time

    from aiohttp import web

    watching = asyncio.Event()

    async def api(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "1"):
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            watching.set()
            await asyncio.sleep(3600)  # a quiet watch: no events, the connection stays open
            return resp
        return web.json_response(
            {
                "kind": "PrefixRoutedModelList",
                "metadata": {"resourceVersion": "5"},
                "items": [prm("5", "10.0.0.1:8000")],
            }
        )

    app = web.Application()
    app.router.add_get("/apis/prefixroute.io/v1alpha1/namespaces/serving/prefixroutedmodels", api)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: default}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    # Without the fix, stop() blocks the loop until the client's read timeout (watch timeout + 30 s).
    monkeypatch.setattr("prefixroute.front.list_watch.WATCH_TIMEOUT_SECONDS", 1)
    fleets: list[Fleet] = []
    source = KubernetesSource("serving", "llama", 16)
    try:
        await source.start(fleets.append)
        await asyncio.wait_for(watching.wait(), 10)
        await asyncio.sleep(0.2)  # the watch thread is now blocked reading the stream
        started = time.monotonic()
        await asyncio.wait_for(source.stop(), 10)
        assert time.monotonic() - started < 3
        assert [m.name for m in fleets[0].members] == ["engine-0"]
    finally:
        await runner.cleanup()
