"""The shared fleet loop: the simulator decides as the live router does, and drives tickets fully."""

from __future__ import annotations

from dataclasses import replace

import aiohttp
import pytest
from aiohttp import web

from prefixroute.bench import synthetic
from prefixroute.bench.fleet_sim import AdapterSetup, Arrival, Routed, SimFleet
from prefixroute.bench.simulate import prepare
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.server import create_app
from prefixroute.front.membership.base import ApplyFleet
from prefixroute.router.app import RunningRouter, build_app, start_router
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import routing_request

ENGINE = EngineConfig(
    model="sim-model", kv_blocks=4096, max_running=8, latency=LatencyModel(50_000.0, 5_000.0), time_scale=100.0
)
ROUTING = RoutingConfig(block_size=64, prefix_blocks=2)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


class NamedEngines:
    """A fixed fleet whose members are named as the simulator names them (the ring hashes names)."""

    def __init__(self, urls: list[str]) -> None:
        self.fleet = Fleet(tuple(Member(f"engine-{i}", url) for i, url in enumerate(urls)))

    async def start(self, apply: ApplyFleet) -> None:
        apply(self.fleet)

    async def stop(self) -> None:
        return None


@pytest.mark.parametrize("strategy", ["prefix-cache", "prefix-hash", "least-load", "round-robin"])
async def test_the_simulator_routes_a_request_sequence_as_the_live_router_does(strategy: str) -> None:
    """Requests sent one at a time (each answered before the next) through a real router in front
    of real engine-sim servers, and the same requests through the simulator's fleet: every request
    reaches the same member."""
    config = RoutingConfig(**{**ROUTING.__dict__, "strategy": strategy})
    requests = synthetic.multiturn(24, seed=3)
    runners = []
    routers: list[RunningRouter] = []
    try:
        urls = []
        for _ in range(3):
            runner, url = await _serve(create_app(ENGINE))
            runners.append(runner)
            urls.append(url)
        settings = RouterSettings(backends=tuple(urls), routing=config)
        router = await start_router(build_app(settings, source=NamedEngines(urls)))
        routers.append(router)
        router_url = f"http://127.0.0.1:{router.port}"
        live = []
        async with aiohttp.ClientSession() as session:
            for req in requests:
                path = "/v1/chat/completions" if req.kind == "chat" else "/v1/completions"
                async with session.post(router_url + path, json=req.body(ENGINE.model, stream=False)) as answer:
                    assert answer.status == 200, await answer.text()
                    live.append(answer.headers["X-Prefixroute-Member"])
    finally:
        for router in routers:
            await router.close()
        for runner in reversed(runners):
            await runner.cleanup()

    fleet = SimFleet(config, ENGINE)
    for i in range(len(urls)):
        fleet.add(f"engine-{i}")
    simulated = []
    for i, item in enumerate(prepare(requests, config, ENGINE)):
        assert item.routing is not None
        at = i * 1000.0  # far apart: each request is over before the next, as in the live run
        fleet.advance_to(at)
        routed = fleet.submit(Arrival(f"r{i}", at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens))
        simulated.append(routed.ticket.member.name)
    fleet.advance_to(float("inf"))
    assert simulated == live
    if strategy != "least-load":  # idle members all tie for least-load; the others spread these prompts
        assert len(set(live)) > 1


def test_every_ticket_is_finished_and_the_load_view_returns_to_idle() -> None:
    requests = synthetic.multiturn(60, rate=50.0, seed=1)
    fleet = SimFleet(ROUTING, ENGINE, routers=2)
    fleet.add("a", "b", "c")
    seen = {id(router.fleet) for router in fleet.routers}  # one fleet (one ring) for all three
    assert len(seen) == 1
    assert [m.name for m in fleet.routers[0].fleet.members] == ["a", "b", "c"]
    routed = []
    for i, item in enumerate(prepare(requests, ROUTING, ENGINE)):
        assert item.routing is not None
        fleet.advance_to(item.at)
        routed.append(
            fleet.submit(Arrival(f"r{i}", item.at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens))
        )
    fleet.advance_to(float("inf"))
    assert all(r.ticket.done for r in routed)
    assert {r.ticket.member.name for r in routed} == {"a", "b", "c"}
    for router in fleet.routers:
        for name in ("a", "b", "c"):
            load = router.load.get(name)
            assert (load.in_flight, load.in_flight_units, load.prefill_units) == (0, 0, 0)


def test_the_routers_learn_each_engines_ttft_in_virtual_time() -> None:
    """The same dispatch as the fronts, timed by the simulation's clock: once the engines have
    answered a few requests, each decision carries a prediction, and it is close to what the
    engine-model delivers."""
    requests = synthetic.multiturn(80, rate=20.0, seed=2)
    fleet = SimFleet(ROUTING, ENGINE)
    fleet.add("a", "b")
    routed = []
    for i, item in enumerate(prepare(requests, ROUTING, ENGINE)):
        assert item.routing is not None
        fleet.advance_to(item.at)
        arrival = Arrival(f"r{i}", item.at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens)
        routed.append(fleet.submit(arrival))
    fleet.advance_to(float("inf"))
    late = [r.ticket for r in routed[40:]]
    assert all(t.predicted is not None and t.delivered is not None for t in late)
    errors = sorted(abs(t.delivered - t.predicted) / t.delivered for t in late)  # type: ignore[operator]
    assert errors[len(errors) // 2] < 0.5  # the median prediction within half of what was delivered


def test_a_retired_engine_finishes_its_requests_and_takes_no_new_ones() -> None:
    requests = synthetic.multiturn(40, rate=100.0, seed=2)
    prepared = prepare(requests, ROUTING, ENGINE)
    fleet = SimFleet(ROUTING, ENGINE)
    fleet.add("a")
    fleet.add("b")
    first = [
        fleet.submit(Arrival(f"r{i}", p.at, p.routing, p.blocks, p.prompt_tokens, p.output_tokens))
        for i, p in enumerate(prepared[:20])
        if p.routing is not None
    ]
    fleet.retire(["a"])
    later = [
        fleet.submit(Arrival(f"s{i}", p.at, p.routing, p.blocks, p.prompt_tokens, p.output_tokens))
        for i, p in enumerate(prepared[20:])
        if p.routing is not None
    ]
    fleet.advance_to(float("inf"))
    assert any(r.ticket.member.name == "a" for r in first)
    assert all(r.ticket.done for r in first + later)
    assert {r.ticket.member.name for r in later} == {"b"}
    assert "a" not in fleet.retiring
    assert "a" not in fleet.routers[0].load.snapshot()


# -- precise mode: every router reads the engines' own events -----------------------------


def test_every_router_replica_holds_exactly_what_each_engine_holds_once_the_events_are_in():
    from prefixroute.bench.fleet_sim import EventDelivery
    from prefixroute.bench.simulate import precise_config

    # 12 tenants' 32-block system prompts do not fit in 3 caches of 100 blocks: engines evict
    small = EngineConfig(model="sim-model", kv_blocks=100, max_running=8, latency=LatencyModel(50_000.0, 5_000.0))
    requests = synthetic.tenants(
        120, rate=20, seed=1, tenants=12, system_tokens=512, question_tokens=40, output_tokens=4, zipf=0.8
    )
    prepared = prepare(requests, ROUTING, small, precise=True)
    config = precise_config(ROUTING, small)
    fleet = SimFleet(config, small, routers=3, events=EventDelivery("sim-model", delay=0.02))
    for i in range(3):
        fleet.add(f"engine-{i}")
    for i, p in enumerate(prepared):
        fleet.advance_to(p.at)
        assert p.precise is not None
        fleet.submit(Arrival(f"r{i}", p.at, p.precise, p.blocks, p.prompt_tokens, p.output_tokens, p.tokens, p.salt))
    fleet.advance_to(float("inf"))
    for name, scheduler in fleet.engines.items():
        held = scheduler.cache.eviction_order()  # the engine's cache, by engine hash (all free: every request ended)
        assert len(held) == 100  # full: it has evicted
        for router, follower in zip(fleet.routers, fleet.followers):
            keys = follower.streams[name].keys
            index = router.strategy.index.stored  # type: ignore[attr-defined]
            assert index.size(name) == len(held)
            assert all(name in index.holders(keys.key_of(h)) for h in held)
            assert follower.precise(name)


# -- router replicas that tell each other their load and history ---------------------------


def _run(routers: int, peers: object, requests: list, engines: int = 4) -> list[str]:  # type: ignore[type-arg]
    fleet = SimFleet(ROUTING, ENGINE, routers=routers, peers=peers)  # type: ignore[arg-type]
    fleet.add(*(f"engine-{i}" for i in range(engines)))
    chosen = []
    for i, item in enumerate(prepare(requests, ROUTING, ENGINE)):
        assert item.routing is not None
        fleet.advance_to(item.at)
        routed = fleet.submit(
            Arrival(f"r{i}", item.at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens)
        )
        chosen.append(routed.ticket.member.name)
    fleet.advance_to(float("inf"))
    assert fleet.idle()
    for router in fleet.routers:  # every request ended, and every replica heard so
        assert all(load.requests == 0 for load in router.load.snapshot().values())
    return chosen


def test_replicas_that_hear_each_other_at_once_decide_as_one_router() -> None:
    """With reports delivered instantly, N replicas behind a round-robin front share one view:
    their decisions are one router's, request for request, under load."""
    from prefixroute.bench.fleet_sim import PeerSharing

    requests = synthetic.sessions(300, rate=200.0, seed=4)
    alone = _run(1, None, requests)
    assert _run(3, PeerSharing(delay=0.0, interval=0.0), requests) == alone
    assert _run(3, None, requests) != alone  # sharing nothing, they do not


def test_late_reports_still_reach_every_replica() -> None:
    from prefixroute.bench.fleet_sim import PeerSharing

    requests = synthetic.multiturn(80, rate=50.0, seed=1)
    fleet = SimFleet(ROUTING, ENGINE, routers=3, peers=PeerSharing(delay=0.05, interval=0.02))
    fleet.add("a", "b", "c")
    for i, item in enumerate(prepare(requests, ROUTING, ENGINE)):
        assert item.routing is not None
        fleet.advance_to(item.at)
        fleet.submit(Arrival(f"r{i}", item.at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens))
    fleet.advance_to(float("inf"))
    for index, view in enumerate(fleet.views):
        assert view.peers() == 2
        assert view.loads() == {}
        own = sum(1 for i in range(80) if i % 3 == index)
        assert view.counts["routed"] == 80 - own  # every other replica's request, learned once


# -- priority bands, TTLs and clients that leave -------------------------------------

SLOW = EngineConfig(model="sim-model", kv_blocks=4096, max_running=2, latency=LatencyModel(1000.0, 10.0))


def _arrival(i: int, at: float, priority: int = 0, prompt: int = 10, output: int = 100) -> Arrival:
    request = routing_request(f"prompt {i} " * 40, ROUTING, tenant=f"t{priority}")
    return Arrival(f"r{i}", at, request, (i,), prompt, output, priority=priority)


def _play(fleet: SimFleet, arrivals: list[Arrival]) -> list[object]:
    out = []
    for arrival in arrivals:
        fleet.advance_to(arrival.at)
        out.append(fleet.submit(arrival))
    fleet.advance_to(float("inf"))
    return out


def test_the_fleet_admits_by_band_and_sheds_sheddable_work_when_every_engine_is_full() -> None:
    started: list[str] = []
    fleet = SimFleet(
        ROUTING, SLOW, max_in_flight_per_member=1, on_first_token=lambda r, _e: started.append(r.arrival.id)
    )
    fleet.add("a")
    _play(fleet, [_arrival(0, 0.0), _arrival(1, 0.1, -1), _arrival(2, 0.2, 0), _arrival(3, 0.3, 10)])
    assert started == ["r0", "r3", "r2"]  # the higher band first once the engine has room
    assert fleet.dropped == {(-1, "sheddable"): 1}
    assert fleet.rejected == 1


def test_a_request_that_waits_past_its_ttl_is_refused_then() -> None:
    dropped: list[tuple[str, str, float]] = []
    fleet = SimFleet(
        ROUTING,
        SLOW,
        max_in_flight_per_member=1,
        max_wait_seconds=1.0,
        on_dropped=lambda a, reason, at: dropped.append((a.id, reason, at)),
    )
    fleet.add("a")
    _play(fleet, [_arrival(0, 0.0), _arrival(1, 0.5)])
    assert dropped == [("r1", "queue-ttl", 1.5)]
    assert fleet.admissions[0].waiting == 0


def test_a_client_that_leaves_is_aborted_in_the_engine_and_its_ticket_finished() -> None:
    one_slot = EngineConfig(model="sim-model", kv_blocks=4096, max_running=1, latency=LatencyModel(1000.0, 10.0))
    fleet = SimFleet(ROUTING, one_slot, patience=2.0)
    fleet.add("a")
    routed = _play(fleet, [_arrival(0, 0.0), _arrival(1, 0.5)])
    assert fleet.dropped == {(0, "client-gone"): 1}
    assert fleet.rejected == 0  # the router refused nothing; the client left
    second = routed[1]
    assert isinstance(second, Routed)
    assert second.ticket.done
    assert second.sequence.first_token is None
    load = fleet.routers[0].load.get("a")
    assert (load.in_flight, load.prefill_units) == (0, 0)


def test_sheddable_work_waits_for_the_engines_prefill_while_a_slot_is_free() -> None:
    """Not refused (a slot is free) but not behind the running prefill either: routed at its end."""
    firsts: dict[str, float] = {}
    fleet = SimFleet(
        ROUTING,
        SLOW,
        max_in_flight_per_member=2,
        on_first_token=lambda r, e: firsts.setdefault(r.arrival.id, e.time),
    )
    fleet.add("a")
    routed = _play(fleet, [_arrival(0, 0.0, prompt=1000), _arrival(1, 0.1, -1)])
    assert routed[1] is None
    assert not fleet.dropped
    assert firsts["r0"] == pytest.approx(1.0)
    assert firsts["r1"] == pytest.approx(1.01)  # admitted at r0's first token, then its own prefill


def _adapter_arrival(i: int, at: float, adapter: str | None) -> Arrival:
    request = routing_request(f"prompt {i} " * 40, ROUTING, adapter=adapter)
    return Arrival(f"r{i}", at, request, (i,), 10, 10, adapter=adapter)


def test_engines_with_adapters_load_them_into_slots_and_count_the_loads() -> None:
    setup = AdapterSetup(slots=1, names=frozenset({"a", "b"}), load_seconds=0.05)
    fleet = SimFleet(replace(ROUTING, strategy="round-robin"), ENGINE, adapters=setup)
    fleet.add("e0")
    assert fleet.routers[0].fleet.by_name["e0"].adapters == frozenset({"a", "b"})  # the ring lists them
    # a, a (resident), b (evicts a), base model (no slot), a again (evicts b): three loads.
    routed = _play(fleet, [_adapter_arrival(i, i * 1.0, a) for i, a in enumerate(["a", "a", "b", None, "a"])])
    assert fleet.adapter_loads() == 3
    waits = [r.sequence.adapter_load_seconds for r in routed if isinstance(r, Routed)]
    assert waits == [0.05, 0.0, 0.05, 0.0, 0.05]


def test_a_placed_adapter_goes_only_to_the_engines_it_is_registered_on() -> None:
    setup = AdapterSetup(2, frozenset({"a", "b"}), placed={"e0": frozenset({"a"}), "e1": frozenset({"b"})})
    fleet = SimFleet(replace(ROUTING, strategy="round-robin"), ENGINE, adapters=setup)
    fleet.add("e0", "e1")
    routed = _play(fleet, [_adapter_arrival(i, i * 0.01, "a" if i % 3 else "b") for i in range(12)])
    for r in routed:
        assert isinstance(r, Routed)
        assert r.ticket.member.name == ("e0" if r.arrival.adapter == "a" else "e1")
    assert fleet.adapter_loads() == 2
