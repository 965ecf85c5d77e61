"""Live replay over real HTTP against engine-sim servers on 127.0.0.1."""

import asyncio
from dataclasses import replace

from aiohttp.test_utils import TestServer

from prefixroute.bench.replay import replay
from prefixroute.bench.results import RunResult
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


async def _precise_replay(tokenizer: str) -> RunResult:
    """A small live precise run: two engine-sims tokenizing with `tokenizer` and publishing their
    KV events, one precise router keying with the same tokenizer and following them."""
    import asyncio

    from prefixroute.bench import synthetic
    from prefixroute.front.precise import PreciseSettings
    from prefixroute.router.app import build_app, start_router
    from prefixroute.router.settings import RouterSettings
    from prefixroute.routing.config import RoutingConfig
    from tests.engine_sim.conftest import publishing_engine_sims

    requests = synthetic.tenants(48, rate=4, seed=0, tenants=4, system_tokens=512, question_tokens=32, output_tokens=2)
    requests = compress(requests, 8.0)
    engine = replace(FAST, model="m", tokenizer=tokenizer, time_scale=50.0)
    async with publishing_engine_sims(2, engine) as (engines, events):
        settings = RouterSettings(
            backends=tuple(engines),
            routing=RoutingConfig(block_size=16, strategy="prefix-cache"),
            precise=PreciseSettings(mode="precise", tokenizer=tokenizer, served_model="m", kv_events=tuple(events)),
        )
        router = await start_router(build_app(settings))
        try:
            await asyncio.sleep(0.5)  # the router's SUB sockets reach both engines
            url = f"http://127.0.0.1:{router.port}"
            return await replay(
                requests, url, engines, label=tokenizer, model="m", time_scale=50.0, show_progress=False
            )
        finally:
            await router.close()


async def test_a_live_precise_run_with_a_bpe_folder_hits_as_the_byte_tokenizer_pair_does():
    """engine-sims and a precise router sharing a BPE folder find as much of the same workload
    cached as the byte tokenizer pair: the keys agree whatever the tokenizer."""
    from tests.small_bpe import small_bpe_folder

    byte = await _precise_replay("engine-sim")
    bpe = await _precise_replay(str(small_bpe_folder()))
    assert byte.errors == bpe.errors == 0
    assert bpe.prompt_tokens != byte.prompt_tokens  # really another tokenizer
    assert byte.hit_rate > 0.5
    assert abs(bpe.hit_rate - byte.hit_rate) < 0.05


async def test_engines_say_which_tokenizer_they_run():
    from prefixroute.bench.replay import engine_tokenizers
    from tests.small_bpe import small_bpe_folder

    folder = str(small_bpe_folder())
    servers = [TestServer(create_app(FAST)), TestServer(create_app(replace(FAST, tokenizer=folder)))]
    for server in servers:
        await server.start_server()
    try:
        engines = [str(s.make_url("")).rstrip("/") for s in servers]
        assert await engine_tokenizers([*engines, "http://127.0.0.1:9"]) == ["engine-sim", folder, None]
    finally:
        for server in servers:
            await server.close()


async def _outcomes(app, requests, patience: float | None) -> list:
    """Replay `requests` against `app` (standing in for a router), with each request's outcome."""
    from prefixroute.bench.replay import Outcome

    server = TestServer(app)
    await server.start_server()
    got: list[Outcome] = []
    try:
        url = str(server.make_url("")).rstrip("/")
        await replay(
            requests, url, [], label="t", model="m", show_progress=False, reset=False,
            tenant_keys={"acme": "sk-acme"}, patience=patience, on_outcome=lambda _r, o: got.append(o),
        )  # fmt: skip
    finally:
        await server.close()
    return got


def _chat(tenant: str | None = "acme"):
    from prefixroute.bench.workload import BenchRequest

    return BenchRequest(0.0, "chat", lambda: {"messages": [{"role": "user", "content": "hi"}]}, 4, tenant=tenant)


async def test_a_shed_request_reports_the_router_s_reason_and_a_tenant_sends_its_key():
    from aiohttp import web

    from prefixroute.front.errors import SHED_REASON_HEADER

    seen: list[str | None] = []

    async def shed(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.json_response({"error": {}}, status=503, headers={SHED_REASON_HEADER: "sheddable"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", shed)
    got = await _outcomes(app, [_chat(), _chat(None)], patience=5.0)
    assert [(o.status, o.shed_reason, o.gave_up, o.ok) for o in got] == [(503, "sheddable", False, False)] * 2
    assert seen == ["Bearer sk-acme", None]


async def test_a_client_without_a_first_token_within_its_patience_hangs_up():
    """A target that sends its headers and then nothing (a request queued in an engine): the
    client gives up at 0.2 s, as the simulated client does, and says so (not a target's error)."""
    from aiohttp import web

    async def stalled(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await asyncio.sleep(5.0)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stalled)
    started = asyncio.get_running_loop().time()
    got = await _outcomes(app, [_chat()], patience=0.2)
    assert asyncio.get_running_loop().time() - started < 2.0
    assert [(o.gave_up, o.ttft, o.ok) for o in got] == [(True, None, False)]


async def test_with_patience_an_answer_after_the_first_token_is_read_to_the_end():
    got = await _outcomes(create_app(FAST), [_chat()], patience=2.0)
    assert [(o.ok, o.gave_up) for o in got] == [(True, False)]
