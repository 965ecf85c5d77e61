"""Fixtures that start real HTTP servers on 127.0.0.1: fake engines and the router itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from prefixroute.front.membership import MembershipSource
from prefixroute.router.app import RunningRouter as Serving
from prefixroute.router.app import build_app
from prefixroute.router.app import start_router as serve_router
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState
from prefixroute.routing.config import RoutingConfig
from tests.router.backend import Behaviour, FakeEngine

TEST_ROUTING = RoutingConfig(block_size=16, prefix_blocks=2)


@dataclass
class RunningRouter:
    url: str
    state: RouterState
    serving: Serving


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """An aiohttp application (a fake engine, engine-sim) on a free port."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@pytest.fixture
async def engines() -> AsyncIterator[Callable[..., Awaitable[list[FakeEngine]]]]:
    started: list[FakeEngine] = []

    async def make(count: int = 1, **behaviour: Any) -> list[FakeEngine]:
        out = []
        for _ in range(count):
            engine = FakeEngine(f"e{len(started)}", Behaviour(**behaviour))
            await engine.start()
            started.append(engine)
            out.append(engine)
        return out

    yield make
    for engine in started:
        await engine.stop()


RouterFactory = Callable[..., Awaitable[RunningRouter]]


@pytest.fixture(params=["aiohttp", "native"])
def upstream_client(request: pytest.FixtureRequest) -> str:
    """Every router test runs with both upstream clients: they must behave alike."""
    return str(request.param)


@pytest.fixture
async def start_router(upstream_client: str) -> AsyncIterator[RouterFactory]:
    started: list[Serving] = []

    async def start(
        backends: list[str] | tuple[str, ...] = (),
        *,
        source: MembershipSource | None = None,
        clock: Callable[[], float] | None = None,
        routing: RoutingConfig = TEST_ROUTING,
        tracer_provider: Any = None,
        **overrides: Any,
    ) -> RunningRouter:
        base = RouterSettings(
            backends=tuple(backends) or ("http://127.0.0.1:9",), routing=routing, upstream_client=upstream_client
        )
        if overrides.get("ring_file") or overrides.get("resource"):
            base = replace(base, backends=(), **overrides)
        else:
            base = replace(base, **overrides)
        state = RouterState(base, clock=clock) if clock else RouterState(base)
        serving = await serve_router(build_app(base, source=source, state=state, tracer_provider=tracer_provider))
        started.append(serving)
        return RunningRouter(f"http://127.0.0.1:{serving.port}", state, serving)

    yield start
    for serving in started:
        await serving.close()


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session
