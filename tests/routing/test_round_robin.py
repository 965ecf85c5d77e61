"""round-robin: the baseline that ignores prefixes and load."""

from prefixroute.routing.load import LoadTracker
from tests.routing.helpers import fleet_of, strategy, text_request


def test_round_robin_cycles(load):
    s, fleet = strategy("round-robin"), fleet_of(3)
    picks = [s.select(text_request("same"), fleet, load).name for _ in range(6)]
    assert picks == ["m0", "m1", "m2", "m0", "m1", "m2"]


def test_the_cycle_ignores_prompts_and_load():
    s, fleet, load = strategy("round-robin"), fleet_of(3), LoadTracker()
    for _ in range(10):
        load.begin("m0", 1000)
    picks = [s.select(text_request(f"prompt {i} " * 4), fleet, load).name for i in range(6)]
    assert picks == ["m0", "m1", "m2", "m0", "m1", "m2"]


def test_the_cycle_runs_over_the_members_left_after_exclusions(load):
    s, fleet = strategy("round-robin"), fleet_of(3)
    picks = [s.select(text_request("x"), fleet, load, exclude={"m1"}).name for _ in range(4)]
    assert picks == ["m0", "m2", "m0", "m2"]
