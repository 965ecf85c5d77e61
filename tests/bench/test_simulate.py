"""The simulation runs the real routing core over engine-sim's own cache and scheduler."""

import pytest
from aiohttp.test_utils import TestClient, TestServer

from prefixroute.bench import synthetic
from prefixroute.bench.simulate import prepare, simulate
from prefixroute.bench.trace import load_trace
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.server import create_app
from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig

ENGINE = EngineConfig(model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0))


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_every_strategy_serves_every_request(small_trace, strategy):
    prepared = prepare(load_trace(small_trace), RoutingConfig(), ENGINE)
    result = simulate(prepared, strategy, 3, RoutingConfig(), ENGINE)
    assert result.requests == 12
    assert result.errors == 0
    assert sum(result.per_replica.values()) == 12
    assert len(result.ttfts) == 12
    assert result.prompt_tokens == sum(p.prompt_tokens for p in prepared)
    assert all(t > 0 for t in result.ttfts)


def test_prefix_aware_routing_beats_round_robin_on_shared_prefixes():
    # 40 tenants' system prompts (40k tokens) do not fit in one replica's cache (16k), but do in four:
    # only routing by prefix lets each replica keep its share.
    small = EngineConfig(model="m", kv_blocks=1000, latency=LatencyModel(20_000.0, 100.0))
    reqs = synthetic.tenants(
        400, rate=4, seed=0, tenants=40, system_tokens=1024, question_tokens=32, output_tokens=16, zipf=0.6
    )
    prepared = prepare(reqs, RoutingConfig(), small)
    rr = simulate(prepared, "round-robin", 4, RoutingConfig(), small)
    pc = simulate(prepared, "prefix-cache", 4, RoutingConfig(), small)
    assert pc.hit_rate > rr.hit_rate + 0.1
    assert pc.summary()["ttft_p50"] < rr.summary()["ttft_p50"]


def test_simulation_is_deterministic(small_trace):
    prepared = prepare(load_trace(small_trace), RoutingConfig(), ENGINE)
    a = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE).summary()
    b = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE).summary()
    assert a == b


def test_requests_the_engine_rejects_are_counted_as_errors(small_trace):
    tight = EngineConfig(model="m", max_model_len=1000)
    result = simulate(
        prepare(load_trace(small_trace), RoutingConfig(), tight), "round-robin", 2, RoutingConfig(), tight
    )
    assert result.errors == 12
    assert result.requests == 0


async def test_one_simulated_replica_caches_exactly_what_the_live_engine_caches(small_trace):
    """Same bodies, same cache classes: the simulation's hit count equals engine-sim's over HTTP."""
    requests = load_trace(small_trace)
    prepared = prepare(requests, RoutingConfig(), ENGINE)
    simulated = simulate(prepared, "round-robin", 1, RoutingConfig(), ENGINE)
    fast = EngineConfig(model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0), time_scale=1000.0)
    async with TestClient(TestServer(create_app(fast))) as client:
        cached = 0
        for req in requests:  # one at a time, as the simulation's arrivals never overlap on this trace
            resp = await client.post("/v1/completions", json=req.body("m", stream=False))
            cached += (await resp.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == simulated.cached_tokens > 0


def test_the_simulator_imports_no_http_or_prometheus_code():
    """STYLE: the simulator runs the pure parts only, so it can never wait on a socket."""
    import subprocess
    import sys

    code = (
        "import sys, prefixroute.bench.simulate, prefixroute.bench.trace, prefixroute.bench.synthetic; "
        "bad = [m for m in ('aiohttp', 'prometheus_client', 'kubernetes', 'kopf') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
