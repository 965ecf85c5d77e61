"""least-load: the member with the fewest requests, ties broken by the ring."""

from prefixroute.routing.load import LoadTracker
from tests.routing.helpers import fleet_of, strategy, text_request


def test_least_load_picks_the_emptiest(load):
    s, fleet = strategy("least-load"), fleet_of(3)
    load.begin("m0", 10)
    load.begin("m1", 10)
    assert s.select(text_request("x" * 40), fleet, load).name == "m2"
    load.report_engine("m2", waiting=4, running=1, kv_usage=0.9)
    assert s.select(text_request("x" * 40), fleet, load).name in {"m0", "m1"}


def test_equal_requests_go_to_the_fewest_prompt_units():
    s, fleet, load = strategy("least-load"), fleet_of(3), LoadTracker()
    request = text_request("y" * 40)
    walk = list(fleet.ring.walk(request.key))  # the fewest units last on the walk: no tie-break can pick it
    for name, units in zip(walk, (500, 300, 20)):
        load.begin(name, units)
    assert s.select(request, fleet, load).name == walk[2]


def test_ties_go_to_the_first_tied_member_on_the_ring_walk_from_the_key():
    s, fleet, load = strategy("least-load"), fleet_of(6), LoadTracker()
    load.begin("m3", 1)  # m3 is never tied with the idle members
    owners = set()
    for i in range(60):
        request = text_request(f"request {i} " * 4)
        expected = next(name for name in fleet.ring.walk(request.key) if name != "m3")
        assert s.select(request, fleet, load).name == expected
        owners.add(expected)
    assert len(owners) == 5  # the keys spread the ties over every idle member
