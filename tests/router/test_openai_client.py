"""The official `openai` client, unmodified, through the router: completions and chat, streamed and not.

Run against the test engine and against engine-sim (the project's vLLM-compatible
engine), so both a scripted answer and a real scheduler's stream cross the router.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from aiohttp import web

from tests.router.conftest import serve

PROMPT = "You are a helpful assistant. " * 8


@pytest.fixture(params=["fake", "engine-sim"])
async def backend_url(request, engines) -> AsyncIterator[str]:
    if request.param == "fake":
        (engine,) = await engines(1)
        yield engine.url
        return
    engine_sim = pytest.importorskip("prefixroute.engine_sim.server")
    from prefixroute.engine_model.config import EngineConfig
    from prefixroute.engine_model.latency import LatencyModel

    config = EngineConfig(
        model="m",
        kv_blocks=256,
        max_running=8,
        max_model_len=8192,
        latency=LatencyModel(100_000.0, 10_000.0),
        time_scale=100.0,
    )
    app: web.Application = engine_sim.create_app(config)
    runner, port = await serve(app)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def api(backend_url, start_router) -> AsyncIterator[openai.AsyncOpenAI]:
    router = await start_router([backend_url])
    client = openai.AsyncOpenAI(base_url=router.url + "/v1", api_key="sk-test", max_retries=0)
    yield client
    await client.close()


async def test_completion(api) -> None:
    result = await api.completions.create(model="m", prompt=PROMPT, max_tokens=4)
    assert result.choices[0].text
    assert result.usage is not None


async def test_completion_stream(api) -> None:
    stream = await api.completions.create(model="m", prompt=PROMPT, max_tokens=4, stream=True)
    pieces = [chunk.choices[0].text async for chunk in stream if chunk.choices]
    assert "".join(pieces)


async def test_chat(api) -> None:
    result = await api.chat.completions.create(
        model="m", messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": "hi"}], max_tokens=4
    )
    assert result.choices[0].message.content


async def test_chat_stream(api) -> None:
    stream = await api.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=4, stream=True
    )
    pieces = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    assert "".join(pieces)


async def test_models(api) -> None:
    models = await api.models.list()
    assert [m.id for m in models.data] == ["m"]


async def test_errors_reach_the_client_as_api_errors(api) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await api.chat.completions.create(model="m", messages=[])
    assert caught.value.status_code == 400


async def test_a_cut_stream_raises_in_the_client(engines, start_router) -> None:
    (engine,) = await engines(1, cut_stream_after=2)
    router = await start_router([engine.url])
    client = openai.AsyncOpenAI(base_url=router.url + "/v1", api_key="k", max_retries=0)
    stream = await client.completions.create(model="m", prompt=PROMPT, stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass
    await client.close()
