"""Front replicas that agree, on real sockets: each router publishes its reports over ZMQ and
follows the others'.

Three routers in this loop (and, in the last test, three `prefixroute router` processes) in
front of the same engines: a request one replica holds in flight counts in the others' load
view; a conversation one replica started is known to the others (they route its next turn
to the same member, believing its history cached there); a replica that stops is counted
out after the silence timeout; and a restarted one starts afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from prefixroute.front.peers import PeerSettings, endpoint
from prefixroute.processes import Child, free_port
from prefixroute.router.app import RunningRouter, build_app, start_router
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.config import RoutingConfig
from tests.polling import until
from tests.router.backend import FakeEngine

ROUTING = RoutingConfig(block_size=16, prefix_blocks=2)
HISTORY = "a long conversation's history, turn after turn after turn; " * 6
# Fast heartbeat and silence, so a stopped replica is counted out within the polling budget.
QUICK = PeerSettings(interval=0.0, heartbeat=0.1, silence=0.5)


def peer_ports(count: int) -> list[int]:
    return [free_port() for _ in range(count)]


def router_settings(engines: list[FakeEngine], port: int, others: list[int], **peers: Any) -> RouterSettings:
    return RouterSettings(
        backends=tuple(e.url for e in engines),
        routing=ROUTING,
        peers=replace(QUICK, port=port, peers=tuple(endpoint("127.0.0.1", p) for p in others), **peers),
    )


@contextlib.asynccontextmanager
async def replicas(engines: list[FakeEngine], count: int = 3) -> AsyncIterator[list[RunningRouter]]:
    ports = peer_ports(count)
    started: list[RunningRouter] = []
    try:
        for port in ports:
            others = [p for p in ports if p != port]
            started.append(await start_router(build_app(router_settings(engines, port, others))))
        await until(
            lambda: all(r.app.state.peers.view.peers() == count - 1 for r in started), "replicas to hear each other"
        )
        yield started
    finally:
        for router in reversed(started):
            await router.close()


def url(router: RunningRouter) -> str:
    return f"http://127.0.0.1:{router.port}"


async def complete(session: aiohttp.ClientSession, router: RunningRouter, prompt: str) -> str:
    async with session.post(url(router) + "/v1/completions", json={"prompt": prompt, "max_tokens": 1}) as resp:
        assert resp.status == 200, await resp.text()
        return resp.headers["X-Prefixroute-Member"]


def seen(router: RunningRouter) -> int:
    """Requests a replica knows of: those it routed, and those its peers reported."""
    return sum(router.app.state.metrics.decision.counts) + peers_of(router).view.counts["routed"]


def peers_of(router: RunningRouter) -> Any:
    link = router.app.state.peers
    assert link is not None
    return link


async def test_requests_one_replica_holds_in_flight_count_in_the_others_load_view(engines) -> None:
    held = await engines(2, hang=True)
    async with replicas(held) as (a, b, c), aiohttp.ClientSession() as session:
        calls = [asyncio.create_task(complete(session, a, f"request {i}: " + HISTORY)) for i in range(3)]
        await until(lambda: sum(len(e.received) for e in held) == 3, "three requests held by the engines")
        mine = {m: load.in_flight for m, load in a.app.state.load.snapshot().items() if load.in_flight}
        for other in (b, c):
            await until(
                lambda o=other: {m: o.app.state.load.get(m).peer_in_flight for m in mine} == mine,
                "the others to count a's requests",
            )
            assert other.app.state.load.get(next(iter(mine))).in_flight == 0  # counted as a peer's, not its own
        metrics = b.app.state.metrics.render().decode()
        assert "prefixroute_router_peers 2.0" in metrics
        assert "prefixroute_router_peer_endpoints 2.0" in metrics
        member = next(iter(mine))
        assert f'prefixroute_router_peer_in_flight{{member="{member}"}} {float(mine[member])}' in metrics
        for call in calls:  # the clients leave: the requests end at a, and at b and c a report later
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        for other in (b, c):
            await until(lambda o=other: not peers_of(o).view.loads(), "the others to see a's requests end")


async def test_a_conversation_started_through_one_replica_is_known_to_the_others(engines) -> None:
    fleet = await engines(4)
    async with replicas(fleet) as routers, aiohttp.ClientSession() as session:
        placed: dict[int, set[str]] = {}
        for turn in range(4):
            for conversation in range(6):
                router = routers[(conversation + turn) % 3]  # each turn through another replica
                prompt = f"conversation {conversation}: " + HISTORY * (turn + 1)
                placed.setdefault(conversation, set()).add(await complete(session, router, prompt))
                # the next turn goes through another replica once this one's report is in
                count = 6 * turn + conversation + 1
                await until(lambda n=count: all(seen(r) >= n for r in routers), "the turn to be reported")
        assert all(len(members) == 1 for members in placed.values()), placed  # every conversation stayed put
        for router in routers:  # ...and each replica believed the history was there when it routed a turn
            text = router.app.state.metrics.render().decode()
            ratio = next(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("prefixroute_router_prefix_match_ratio_sum")
            )
            assert ratio > 3.0  # 6 of its 8 turns were later turns, each at least half history
            assert peers_of(router).view.counts["routed"] == 16  # the other two replicas' 16 turns


async def test_a_stopped_replica_is_counted_out_and_a_restarted_one_starts_afresh(engines) -> None:
    held = await engines(2, hang=True)
    ports = peer_ports(2)
    a = await start_router(build_app(router_settings(held, ports[0], [ports[1]])))
    b = await start_router(build_app(router_settings(held, ports[1], [ports[0]])))
    try:
        async with aiohttp.ClientSession() as session:
            call = asyncio.create_task(complete(session, b, HISTORY))
            await until(lambda: bool(peers_of(a).view.loads()), "a to count b's request")
            first = peers_of(b).sender
            await b.close()  # b dies with its request in flight: a hears nothing more
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
            await until(lambda: peers_of(a).view.peers() == 0, "b to fall silent")
            assert not peers_of(a).view.loads()
            assert peers_of(a).view.counts["expired"] == 1
            b = await start_router(build_app(router_settings(held, ports[1], [ports[0]])))
            await until(lambda: peers_of(a).view.peers() == 1, "a to hear b again")
            assert peers_of(b).sender != first
    finally:
        await b.close()
        await a.close()


def test_peer_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="--peer-port"):
        PeerSettings(peers=("tcp://a:1",)).check()
    with pytest.raises(ValueError, match="not both"):
        PeerSettings(port=9200, peers=("tcp://a:1",), service="ns/router").check()
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        PeerSettings(port=9200, service="router").check()
    with pytest.raises(ValueError, match="tcp://"):
        PeerSettings(port=9200, peers=("a:1",)).check()
    with pytest.raises(ValueError, match="silence"):
        PeerSettings(port=9200, silence=0.5).check()


# -- three `prefixroute router` processes -------------------------------------------------


async def test_three_router_processes_agree(engines, tmp_path: Path) -> None:
    """The real command: three processes on their own ports, peers by --peers, in front of the
    same engines: every conversation stays on one member whichever process takes a turn."""
    from prefixroute.bench.local_fleet import router_command

    fleet = await engines(3)
    peers = peer_ports(3)
    ports = peer_ports(3)
    children = []
    for i, (port, peer) in enumerate(zip(ports, peers)):
        others = ",".join(endpoint("127.0.0.1", p) for p in peers if p != peer)
        flags = ("--backends", ",".join(e.url for e in fleet), "--block-size", "16", "--log-level", "WARNING")
        flags += ("--peer-port", str(peer), "--peers", others)
        children.append(Child(f"router-{i}", router_command(port, *flags), tmp_path / f"router-{i}.log", port))
    for child in children:
        child.start()
    try:
        for child in children:
            await child.wait_http_async("/ready", timeout=30)
        async with aiohttp.ClientSession() as session:

            async def metric(child: Child, name: str) -> float:
                async with session.get(child.url + "/metrics") as resp:
                    text = await resp.text()
                return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))

            async def settled(n: int) -> None:
                """Every process knows of `n` requests: routed itself, or reported by a peer."""
                for _ in range(200):
                    known = [
                        await metric(c, "prefixroute_router_decision_seconds_count")
                        + await metric(c, 'prefixroute_router_peer_reports_total{kind="routed"}')
                        for c in children
                    ]
                    if all(k >= n for k in known):
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"every process to know of {n} requests")

            async def heard(n: int) -> None:
                for _ in range(200):
                    counts = [await metric(c, "prefixroute_router_peers") for c in children]
                    if all(count == n for count in counts):
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"every process to hear {n} peers")

            await heard(2)
            placed: dict[int, set[str]] = {}
            for turn in range(3):
                for conversation in range(6):
                    child = children[(conversation + turn) % 3]
                    body = {"prompt": f"conversation {conversation}: " + HISTORY * (turn + 1), "max_tokens": 1}
                    async with session.post(child.url + "/v1/completions", json=body) as resp:
                        assert resp.status == 200, await resp.text()
                        placed.setdefault(conversation, set()).add(resp.headers["X-Prefixroute-Member"])
                    await settled(6 * turn + conversation + 1)  # the next turn is another process's
            assert all(len(members) == 1 for members in placed.values()), placed
            for child in children:
                assert await metric(child, 'prefixroute_router_peer_reports_total{kind="routed"}') == 12
                assert await metric(child, "prefixroute_router_prefix_match_ratio_sum") > 2.0
            children[2].signal(signal.SIGTERM)
            await heard_by_first_two(children, metric)
    finally:
        for child in children:
            child.stop()


async def heard_by_first_two(children: list[Child], metric: Callable[..., Any]) -> None:
    for _ in range(200):
        counts = [await metric(c, "prefixroute_router_peers") for c in children[:2]]
        if counts == [1.0, 1.0]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the two left to count only each other")
