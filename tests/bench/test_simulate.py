"""The simulation runs the real routing core over engine-sim's own cache and scheduler."""

import pytest
from aiohttp.test_utils import TestClient, TestServer

from prefixroute.bench import synthetic
from prefixroute.bench.simulate import MEASURED, RouterTime, prepare, simulate
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


def test_a_fixed_router_time_is_added_to_every_ttft_and_reported_beside(small_trace):
    prepared = prepare(load_trace(small_trace), RoutingConfig(), ENGINE)
    plain = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE)
    charged = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE, router_time=RouterTime(0.002))
    assert charged.ttfts == pytest.approx([t + 0.002 for t in plain.ttfts])
    assert charged.summary()["router_ms_p50"] == 2.0
    assert not plain.router_times  # nothing charged: the column stays empty
    assert plain.summary()["router_ms_p50"] is None


@pytest.mark.parametrize("mode", ["approximate", "precise"])
def test_the_measured_router_time_is_each_requests_keying_and_routing_step(small_trace, mode):
    prepared = prepare(load_trace(small_trace), RoutingConfig(), ENGINE, precise=True)
    assert all(p.key_s > 0 and p.precise_key_s > 0 for p in prepared)
    plain = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE, mode=mode)
    measured = simulate(prepared, "prefix-cache", 3, RoutingConfig(), ENGINE, mode=mode, router_time=MEASURED)
    scaled = simulate(
        prepared, "prefix-cache", 3, RoutingConfig(), ENGINE, mode=mode, router_time=RouterTime(None, 1000.0)
    )
    keying = sorted(p.precise_key_s if mode == "precise" else p.key_s for p in prepared)
    assert len(measured.router_times) == 12
    assert min(measured.router_times) > keying[0]  # the keying, and the decision on top
    assert min(scaled.router_times) > 1000 * keying[0]  # a live run's --time-scale, applied to both
    assert sum(measured.ttfts) == pytest.approx(sum(plain.ttfts) + sum(measured.router_times))


def test_a_precise_run_with_a_bpe_folder_hits_as_the_byte_tokenizer_pair_does():
    """The same workload keyed by a real byte-level BPE on both sides (engines and routers) finds
    the same share of its prompt cached as with engine-sim's byte tokenizer: precise mode does
    not depend on the tokenizer, only on router and engine agreeing on it."""
    from tests.small_bpe import small_bpe_folder

    reqs = synthetic.tenants(120, rate=4, seed=0, tenants=6, system_tokens=512, question_tokens=32, output_tokens=4)
    rates = {}
    for name, tokenizer in (("byte", "engine-sim"), ("bpe", str(small_bpe_folder()))):
        engine = EngineConfig(model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0), tokenizer=tokenizer)
        prepared = prepare(reqs, RoutingConfig(), engine, precise=True)
        assert not [p.error for p in prepared if p.error]
        result = simulate(prepared, "prefix-cache", 3, RoutingConfig(), engine, mode="precise")
        rates[name] = result.hit_rate
    assert rates["byte"] > 0.5
    assert rates["bpe"] == pytest.approx(rates["byte"], abs=0.03)


def test_an_adapters_engine_blocks_and_router_keys_are_its_own() -> None:
    from prefixroute.bench.workload import BenchRequest

    def request(adapter: str | None) -> BenchRequest:
        return BenchRequest(
            0.0, "completion", lambda: {"prompt": "the same words, block after block " * 40}, 4, adapter=adapter
        )

    base, for_a, for_b = prepare([request(None), request("a"), request("b")], RoutingConfig(), ENGINE)
    assert (base.error, for_a.error, for_b.error) == (None, None, None)  # the engine serves the adapter's name
    assert (for_a.adapter, base.adapter) == ("a", None)
    assert set(for_a.blocks).isdisjoint(base.blocks)  # the engine's cache keys include the LoRA
    assert set(for_a.blocks).isdisjoint(for_b.blocks)
    assert for_a.routing is not None
    assert for_a.routing.adapter == "a"


async def test_an_adapter_request_s_simulated_blocks_are_the_ones_engine_sim_stores(tmp_path) -> None:
    """One keying for the engine's blocks: what the simulation keys a request's blocks by (with
    an adapter and a cache_salt) is exactly what a real engine-sim holds after serving it."""
    from prefixroute.bench.workload import BenchRequest
    from prefixroute.engine_sim.lora import LoraModule, write_adapter_folder
    from prefixroute.engine_sim.server import DRIVER

    body = {"prompt": "the same words, block after block " * 40, "cache_salt": "tenant-7"}
    requests = [BenchRequest(0.0, "completion", lambda: dict(body), 4, adapter=a) for a in ("a", None)]
    prepared = prepare(requests, RoutingConfig(), ENGINE)
    assert all(p.error is None and len(p.blocks) > 10 for p in prepared)
    fast = EngineConfig(
        model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0), time_scale=1000.0, max_loras=1
    )
    app = create_app(fast, lora_modules=[LoraModule("a", str(write_adapter_folder(tmp_path / "a")))])
    async with TestClient(TestServer(app)) as client:
        cache = app[DRIVER].scheduler.cache
        for req, simulated in zip(requests, prepared):
            before = set(cache.eviction_order())
            resp = await client.post("/v1/completions", json=req.body("m", stream=False))
            assert resp.status == 200
            stored = set(cache.eviction_order()) - before
            assert stored == set(simulated.blocks)  # the same blocks, not merely as many
    assert set(prepared[0].blocks).isdisjoint(prepared[1].blocks)


def test_precise_mode_prices_an_adapters_load_in_tokens() -> None:
    from prefixroute.bench.simulate import precise_config

    assert precise_config(RoutingConfig(), ENGINE).adapter_load_cost == 1000
    assert precise_config(RoutingConfig(adapter_load_cost=30), ENGINE).adapter_load_cost == 30
    assert precise_config(RoutingConfig(), ENGINE).block_size == ENGINE.block_tokens
