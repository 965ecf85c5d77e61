from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_sim.server import create_app

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
