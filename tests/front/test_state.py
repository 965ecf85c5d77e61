"""A front's state: the fleet, strategy, load view, ejections and metrics change together, with
a clock the test drives. The router's subclass (its settings wired in): tests/router/test_state.py."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.front.ejections import Ejections
from prefixroute.front.holding import HoldFailed, Holding
from prefixroute.front.metrics import FrontMetrics
from prefixroute.front.state import FrontState
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import routing_request

CONFIG = RoutingConfig(block_size=8, prefix_blocks=1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fleet(*names: str, ready: bool = True) -> Fleet:
    return Fleet(tuple(Member(n, f"http://{n}", ready=ready) for n in names), CONFIG.virtual_nodes)


def front(*names: str, clock: Clock | None = None, holding: Holding | None = None) -> FrontState:
    state = FrontState(CONFIG, FrontMetrics(CONFIG.strategy), Ejections(5.0, 60.0), clock or Clock(), holding=holding)
    if names:
        state.apply_fleet(fleet(*names))
    return state


def gauges(state: FrontState) -> dict[tuple[str, str], float]:
    """(sample name, member label) -> value of what a scrape reads from the state."""
    return {
        (sample.name, sample.labels.get("member", "")): sample.value
        for family in text_string_to_metric_families(state.metrics.render().decode())
        for sample in family.samples
    }


def test_a_state_waits_for_its_first_fleet() -> None:
    state = front()
    assert not state.fleet_received
    assert state.fleet.members == ()
    state.apply_fleet(fleet())
    assert state.fleet_received  # an empty fleet is still word from the source


def test_a_member_that_leaves_is_forgotten_everywhere() -> None:
    state = front("a", "b")
    request = routing_request("y" * 32, CONFIG)
    a = state.fleet.by_name["a"]
    state.dispatcher.strategy.on_routed(request, a)
    state.load.report_engine("a", 3, 4, 0.5)
    state.metrics.recent_engines.report("a", hits=1, queries=2)
    state.failed(a)
    state.apply_fleet(fleet("b"))
    assert state.dispatcher.strategy.matched_blocks(request, a) == 0
    assert "a" not in state.load.snapshot()
    assert state.ejections.excluded(state.clock()) == frozenset()
    assert state.metrics.recent_engines.hit_rate() is None
    assert state.member_left("a")
    assert not state.member_left("b")


def test_a_member_with_a_new_address_starts_clean() -> None:
    state = front("a")
    request = routing_request("y" * 32, CONFIG)
    state.dispatcher.strategy.on_routed(request, state.fleet.by_name["a"])
    state.apply_fleet(Fleet((Member("a", "http://elsewhere"),), CONFIG.virtual_nodes))
    assert state.dispatcher.strategy.matched_blocks(request, state.fleet.by_name["a"]) == 0


def test_an_equal_fleet_changes_nothing() -> None:
    state = front("a")
    state.load.begin("a", 10)
    state.apply_fleet(fleet("a"))
    assert state.load.get("a").in_flight == 1


def test_an_ejected_member_is_skipped_until_its_time_is_up() -> None:
    clock = Clock()
    state = front("a", "b", clock=clock)
    state.failed(state.fleet.by_name["a"])
    assert state.excluded() == {"a"}
    assert [m.name for m in state.ready_members()] == ["b"]
    assert state.retry_after() == 5
    clock.now += 2.5
    assert state.retry_after() == 3  # rounded up: never tell a client to come back too early
    clock.now += 2.5
    assert state.excluded() == frozenset()
    assert len(state.ready_members()) == 2
    assert state.retry_after() == 1  # nothing out: the least a 503 says


def test_panic_mode_when_every_member_is_ejected() -> None:
    state = front("a", "b")
    state.failed(state.fleet.by_name["a"])
    state.failed(state.fleet.by_name["b"])
    assert state.excluded() == frozenset()  # try them all rather than refuse everything
    assert state.ready_members() == []  # but readiness says nothing is ready


def test_members_that_are_not_routable_are_never_ready() -> None:
    state = front()
    state.apply_fleet(fleet("a", ready=False))
    assert state.ready_members() == []
    assert state.excluded() == frozenset()


def test_a_scrape_reads_the_state_as_it_is_now() -> None:
    state = front("a", "b")
    state.load.begin("a", 10)
    state.load.begin("a", 10)
    state.failed(state.fleet.by_name["b"])
    found = gauges(state)
    assert (found[("prefixroute_in_flight", "a")], found[("prefixroute_in_flight", "b")]) == (2, 0)
    assert found[("prefixroute_ring_members", "")] == 2
    assert found[("prefixroute_ejected_members", "")] == 1
    assert found[("prefixroute_ejections_total", "b")] == 1
    assert found[("prefixroute_load_imbalance", "")] == 2.0  # max 2 over a mean of 1


async def test_a_held_request_goes_on_when_a_member_arrives() -> None:
    state = front(holding=Holding(30.0, 4))
    state.apply_fleet(fleet())
    held = asyncio.create_task(state.hold_for_members())
    await asyncio.sleep(0)
    assert state.holding.held == 1
    assert not held.done()
    state.apply_fleet(fleet("a"))
    await held
    assert state.holding.outcomes["served"] == 1


async def test_without_holding_an_empty_fleet_refuses_at_once() -> None:
    state = front()
    state.apply_fleet(fleet())
    with pytest.raises(HoldFailed):
        await state.hold_for_members()
    state.apply_fleet(fleet("a"))
    await state.hold_for_members()  # a routable member: nothing to wait for
