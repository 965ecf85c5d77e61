"""The router's state is a front's state (tests/front/test_state.py) built from the router's
settings: its ejection times, its holding, its routing and its metrics' names."""

from __future__ import annotations

from prefixroute.router.metrics import PREFIX
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member

CONFIG = RoutingConfig(block_size=8, prefix_blocks=1, strategy="least-load")


def test_the_routers_settings_shape_its_state() -> None:
    settings = RouterSettings(
        backends=("http://a",), routing=CONFIG, eject_seconds=2.0, hold_seconds=7.0, max_held_requests=3
    )
    state = RouterState(settings, clock=lambda: 0.0)
    assert state.settings is settings
    assert state.config is CONFIG
    assert (state.holding.seconds, state.holding.limit) == (7.0, 3)
    state.apply_fleet(Fleet((Member("a", "http://a"),), CONFIG.virtual_nodes))
    assert state.ejections.failed("a", 0.0) == 2.0  # the first ejection lasts --eject-seconds


def test_its_metrics_are_the_routers() -> None:
    state = RouterState(RouterSettings(backends=("http://a",), routing=CONFIG))
    state.metrics.request_done("a", 200)
    text = state.metrics.render().decode()
    assert f'{PREFIX}requests_total{{member="a",status="200",strategy="least-load"}} 1.0' in text
    assert f"{PREFIX}ring_members 0.0" in text  # the state view is attached
