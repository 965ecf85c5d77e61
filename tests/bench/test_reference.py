"""The bench's yardsticks: a longest-prefix router and the ceiling of one unlimited cache."""

from prefixroute.bench import synthetic
from prefixroute.bench.reference import LongestPrefix, unlimited_cache_hit_rate
from prefixroute.bench.simulate import prepare, simulate
from prefixroute.engine_model.config import EngineConfig
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.load import LoadTracker
from tests.routing.helpers import SMALL_BLOCKS, fleet_of, text_request

ENGINE = EngineConfig(model="m", kv_blocks=2000)


def test_longest_prefix_takes_the_longest_match_within_the_bound():
    s, fleet, load = LongestPrefix(SMALL_BLOCKS), fleet_of(4), LoadTracker()
    short, long = text_request("a shared beginning" * 3), text_request("a shared beginning" * 3 + "and more" * 6)
    s.on_routed(short, fleet.by_name["m1"])
    s.on_routed(long, fleet.by_name["m2"])
    assert s.select(text_request("a shared beginning" * 3 + "and more" * 6 + "!"), fleet, load).name == "m2"
    for _ in range(6):
        load.begin("m2", 1)  # over its bound now: the next longest holder
    assert s.select(long, fleet, load).name == "m1"
    # Nobody holds it: the least loaded.
    for name in ("m0", "m1"):
        load.begin(name, 1)
    assert s.select(text_request("nothing like it" * 4), fleet, load).name == "m3"


def test_no_router_beats_one_unlimited_cache():
    reqs = synthetic.sessions(120, rate=20, seed=1, prefix_tokens=256, min_turn_tokens=32, max_turn_tokens=64)
    prepared = prepare(reqs, RoutingConfig(), ENGINE)
    ceiling = unlimited_cache_hit_rate(prepared, ENGINE.block_tokens)
    reference = simulate(prepared, "round-robin", 3, RoutingConfig(), ENGINE, make_strategy=LongestPrefix, label="lp")
    assert reference.strategy == "lp"
    assert reference.requests == len(reqs)
    for strategy in ("round-robin", "prefix-cache"):
        assert simulate(prepared, strategy, 3, RoutingConfig(), ENGINE).hit_rate <= ceiling
    assert reference.hit_rate <= ceiling
    assert ceiling > 0.5
