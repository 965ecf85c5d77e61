"""The router's fixtures (a router process over fake engines), shared with the router's own tests,
and the benchmark's bare-protocol engine."""

import asyncio

import pytest

from prefixroute.bench.router_cost.backend import FastEngine
from tests.router.conftest import client, start_router, upstream_client  # noqa: F401 - pytest fixtures


@pytest.fixture
async def fast_engine():
    """FastEngine on a free port of 127.0.0.1: its base URL."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FastEngine, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
