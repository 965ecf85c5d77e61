"""The one place where strategy names become strategies."""

import pytest

from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from prefixroute.routing.errors import UnknownStrategy
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.load import LoadTracker
from tests.routing.helpers import fleet_of, strategy, text_request


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_strategy_name_builds_that_strategy(name):
    assert make_strategy(RoutingConfig(strategy=name)).name == name


def test_a_name_the_factory_does_not_know_is_refused():
    bad = RoutingConfig()
    object.__setattr__(bad, "strategy", "random")  # past RoutingConfig's own check (tests/routing/test_config.py)
    with pytest.raises(UnknownStrategy, match="unknown strategy 'random'"):
        make_strategy(bad)


def test_each_call_builds_a_strategy_of_its_own():
    """Strategies keep state (a cycle, an index): two fronts must never share one."""
    fleet, load = fleet_of(3), LoadTracker()
    first, second = strategy("round-robin"), strategy("round-robin")
    first.select(text_request("x"), fleet, load)
    assert second.select(text_request("x"), fleet, load).name == "m0"


def test_the_configs_load_knobs_reach_prefix_hash():
    """With a bound of 1.0 x the fair share and no slack, a hot key spills at once; with
    the defaults (slack 3) it stays on its owner."""
    hot = text_request("the same hot prefix" * 4)
    for overrides, owners in (({"load_factor": 1.0, "load_slack": 0}, 2), ({}, 1)):
        s, fleet, load = strategy("prefix-hash", **overrides), fleet_of(4), LoadTracker()
        chosen = set()
        for _ in range(2):
            member = s.select(hot, fleet, load)
            load.begin(member.name, hot.units)
            chosen.add(member.name)
        assert len(chosen) == owners, overrides
