"""Live replay over real HTTP against engine-sim servers on 127.0.0.1."""

from aiohttp.test_utils import TestServer

from prefixroute.bench.replay import replay
from prefixroute.bench.trace import load_trace
from prefixroute.bench.workload import compress
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.server import create_app

FAST = EngineConfig(model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0), time_scale=200.0)


async def test_replay_end_to_end_reads_hits_and_per_replica_counts_from_engine_metrics(small_trace):
    requests = compress(load_trace(small_trace), 50.0)
    servers = [TestServer(create_app(FAST)) for _ in range(2)]
    for server in servers:
        await server.start_server()
    try:
        engines = [str(s.make_url("")).rstrip("/") for s in servers]
        result = await replay(
            requests, engines[0], engines, label="direct", model="m", time_scale=200.0, show_progress=False
        )
        again = await replay(
            requests, engines[0], engines, label="warm", model="m", time_scale=200.0, reset=False, show_progress=False
        )
    finally:
        for server in servers:
            await server.close()
    assert result.errors == 0
    assert result.requests == 12
    assert len(result.ttfts) == 12
    assert result.per_replica == {"engine-0": 12, "engine-1": 0}
    assert result.prompt_tokens == sum(3 * 512 + 100 + i for i in range(12))
    assert 0 < result.hit_rate < 1
    assert again.hit_rate > result.hit_rate  # the caches were kept warm
    summary = result.summary()
    assert summary["imbalance"] == 2.0
    assert summary["ttft_p50"] > 0


async def test_unreachable_target_counts_errors_not_crashes(small_trace):
    requests = compress(load_trace(small_trace), 100.0)[:3]
    server = TestServer(create_app(FAST))
    await server.start_server()
    try:
        engine = str(server.make_url("")).rstrip("/")
        result = await replay(requests, "http://127.0.0.1:9", [engine], label="dead", model="m", show_progress=False)
    finally:
        await server.close()
    assert result.errors == 3
    assert result.requests == 0


async def test_several_targets_take_the_requests_in_turn_as_a_service_spreads_router_replicas(small_trace):
    """Each engine stands in for a router replica here: the engines' own counters show the turns."""
    requests = compress(load_trace(small_trace), 50.0)
    servers = [TestServer(create_app(FAST)) for _ in range(2)]
    for server in servers:
        await server.start_server()
    try:
        engines = [str(s.make_url("")).rstrip("/") for s in servers]
        result = await replay(
            requests, engines, engines, label="turns", model="m", time_scale=200.0, show_progress=False
        )
    finally:
        for server in servers:
            await server.close()
    assert result.errors == 0
    assert result.per_replica == {"engine-0": 6, "engine-1": 6}
