"""A front's peers from a Service's EndpointSlices: the serving addresses, itself left out."""

from __future__ import annotations

from typing import Any

from prefixroute.front.peer_discovery import ServicePeers, peer_endpoints
from prefixroute.front.peers import endpoint
from prefixroute.router.app import build_app, start_router
from tests.front.test_peers import peer_ports, peers_of, router_settings
from tests.polling import until


async def test_peers_found_from_a_service_s_endpoints_leave_the_replica_itself_out(engines) -> None:
    fleet = await engines(1)
    ports = peer_ports(2)
    slices = [{"endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]}]

    class Edge:
        def slices(self) -> list[dict[str, Any]]:
            return slices

    # Both replicas on 127.0.0.1: each finds "the other" at 127.0.0.1 and its own port.
    routers = []
    for mine, theirs in ((ports[0], ports[1]), (ports[1], ports[0])):
        app = build_app(router_settings(fleet, mine, []))
        link = app.state.peers
        assert link is not None
        link.discovery = ServicePeers("ns", "router", theirs, interval=0.1, edge_factory=Edge)
        routers.append(await start_router(app))
    try:
        await until(lambda: all(peers_of(r).view.peers() == 1 for r in routers), "each to find the other")
        assert peers_of(routers[0]).followed() == [endpoint("127.0.0.1", ports[1])]
        slices.clear()  # the Service lost its endpoints: the peers are forgotten
        await until(lambda: all(not peers_of(r).followed() for r in routers), "the peers to be dropped")
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
