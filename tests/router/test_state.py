"""The fleet, strategy, load view and ejections change together."""

from __future__ import annotations

from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import routing_request

CONFIG = RoutingConfig(block_size=8, prefix_blocks=1)


def state_with(*names: str) -> RouterState:
    state = RouterState(RouterSettings(backends=("http://x",), routing=CONFIG), clock=lambda: 0.0)
    state.apply_fleet(Fleet(tuple(Member(n, f"http://{n}") for n in names), CONFIG.virtual_nodes))
    return state


def test_removed_member_is_forgotten_everywhere() -> None:
    state = state_with("a", "b")
    request = routing_request("y" * 32, CONFIG)
    a = state.fleet.by_name["a"]
    state.dispatcher.strategy.on_routed(request, a)
    state.load.report_engine("a", 3, 4, 0.5)
    state.failed(a)
    state.apply_fleet(Fleet((Member("b", "http://b"),), CONFIG.virtual_nodes))
    assert state.dispatcher.strategy.matched_blocks(request, a) == 0
    assert "a" not in state.load.snapshot()
    assert state.ejections.excluded(0.0) == frozenset()


def test_member_with_a_new_address_starts_clean() -> None:
    state = state_with("a")
    request = routing_request("y" * 32, CONFIG)
    state.dispatcher.strategy.on_routed(request, state.fleet.by_name["a"])
    state.apply_fleet(Fleet((Member("a", "http://elsewhere"),), CONFIG.virtual_nodes))
    assert state.dispatcher.strategy.matched_blocks(request, state.fleet.by_name["a"]) == 0


def test_panic_mode_when_everything_is_ejected() -> None:
    state = state_with("a", "b")
    state.failed(state.fleet.by_name["a"])
    assert state.excluded() == {"a"}
    assert [m.name for m in state.ready_members()] == ["b"]
    state.failed(state.fleet.by_name["b"])
    assert state.excluded() == frozenset()  # try them all rather than refuse everything
    assert state.ready_members() == []
    assert state.retry_after() == 5


def test_equal_fleet_is_a_no_op() -> None:
    state = state_with("a")
    state.load.begin("a", 10)
    state.apply_fleet(Fleet((Member("a", "http://a"),), CONFIG.virtual_nodes))
    assert state.load.get("a").in_flight == 1
