from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.kv_publisher import KVEventsConfig
from prefixroute.engine_sim.lora import LoraModule
from prefixroute.engine_sim.server import create_app
from prefixroute.processes import free_port

# Fast enough that the tests take no noticeable time; still the real scheduler.
FAST = EngineConfig(
    model="sim-model",
    kv_blocks=64,
    max_running=4,
    max_model_len=4096,
    latency=LatencyModel(10_000.0, 1_000.0),
    time_scale=100.0,
)


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(create_app(FAST, model_path="/tmp/sim-model-dir"))) as c:
        yield c


@asynccontextmanager
async def publishing_engine_sims(
    count: int, engine: EngineConfig = FAST, lora_modules: Sequence[LoraModule] = ()
) -> AsyncIterator[tuple[list[str], list[str]]]:
    """`count` engine-sims of `engine`'s settings serving in this loop on real sockets, each
    publishing its KV events over ZMQ (vLLM's flag and wire format), each with `lora_modules`
    registered: their base URLs and event endpoints, in order."""
    runners: list[web.AppRunner] = []
    urls, events = [], []
    try:
        for i in range(count):
            port = free_port()
            config = KVEventsConfig(
                enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://*:{port}", topic=f"e{i}"
            )
            app = create_app(engine, kv_events=config, lora_modules=lora_modules)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            runners.append(runner)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            urls.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
            events.append(f"tcp://127.0.0.1:{port}")
        yield urls, events
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
