"""A front's peers from a Service's EndpointSlices: listed, then watched; itself left out."""

from __future__ import annotations

import queue
from collections.abc import Iterator, Mapping
from typing import Any

from prefixroute.front.peer_discovery import ServicePeers, peer_endpoints
from prefixroute.front.peers import endpoint
from prefixroute.router.app import build_app, start_router
from tests.front.test_peers import peer_ports, peers_of, router_settings
from tests.polling import until


def piece(name: str, *addresses: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "endpoints": [{"addresses": [a], "conditions": {"ready": ready}} for a in addresses],
    }


class Edge:
    """The API server's side: a list, then the events the test sends, until closed."""

    def __init__(self, slices: list[dict[str, Any]], events: queue.Queue[tuple[str, dict[str, Any]] | None]):
        self.slices, self.events = slices, events

    def list(self) -> tuple[list[dict[str, Any]], str]:
        return list(self.slices), "1"

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        while (event := self.events.get()) is not None:
            yield event

    def close(self) -> None:
        self.events.put(None)


async def test_replicas_find_each_other_through_the_service_and_follow_its_changes(engines) -> None:
    fleet = await engines(1)
    ports = peer_ports(2)
    streams: list[queue.Queue[tuple[str, dict[str, Any]] | None]] = [queue.Queue(), queue.Queue()]
    routers = []
    # Both replicas on 127.0.0.1, each listening on its own port: each finds "the other" at
    # 127.0.0.1 on the port the other publishes on (in a cluster: each pod's IP, one port).
    for mine, theirs, events in ((ports[0], ports[1], streams[0]), (ports[1], ports[0], streams[1])):
        app = build_app(router_settings(fleet, mine, []))
        link = app.state.peers
        assert link is not None
        link.discovery = ServicePeers(
            "ns", "router", theirs, edge_factory=lambda ev=events: Edge([piece("a", "127.0.0.1")], ev)
        )
        routers.append(await start_router(app))
    try:
        await until(lambda: all(peers_of(r).view.peers() == 1 for r in routers), "each to find the other")
        assert peers_of(routers[0]).followed() == [endpoint("127.0.0.1", ports[1])]
        for events in streams:  # the Service lost its endpoints: the peers are forgotten at once
            events.put(("MODIFIED", piece("a")))
        await until(lambda: all(not peers_of(r).followed() for r in routers), "the peers to be dropped")
        assert all(peers_of(r).view.peers() == 0 for r in routers)
    finally:
        for router in reversed(routers):
            await router.close()


def test_serving_addresses_of_endpoint_slices_are_peers() -> None:
    slices = [
        {
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": False, "serving": True, "terminating": True}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": False, "serving": False}},
                {"addresses": ["fd00::4"]},
            ]
        },
        {"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]},
    ]
    assert peer_endpoints(slices, 9200) == ["tcp://10.0.0.1:9200", "tcp://10.0.0.2:9200", "tcp://[fd00::4]:9200"]


async def test_a_failed_list_keeps_the_peers_and_lists_again() -> None:
    calls: list[str] = []
    events: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()

    def factory() -> Edge:
        calls.append("edge")
        if len(calls) == 1:
            raise OSError("the API server is down")
        return Edge([piece("a", "10.0.0.9")], events)

    seen: list[list[str]] = []
    discovery = ServicePeers("ns", "router", 9200, edge_factory=factory, backoff=(0.01, 0.01))
    await discovery.start(seen.append)
    try:
        await until(lambda: seen == [["tcp://10.0.0.9:9200"]], "the second list to deliver")
        events.put(("ADDED", piece("b", "10.0.0.10")))
        await until(lambda: seen[-1] == ["tcp://10.0.0.10:9200", "tcp://10.0.0.9:9200"], "the watch to deliver")
        events.put(("DELETED", piece("a")))
        await until(lambda: seen[-1] == ["tcp://10.0.0.10:9200"], "the deletion")
    finally:
        await discovery.stop()
