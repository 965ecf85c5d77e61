"""The bootstrap (`epp/envoy.py`) with a real Envoy in front of a real EPP and real HTTP engines:
requests reach the engine the EPP picked, in both body modes; a client cannot steer them;
FailClose and FailOpen behave as an InferencePool's endpointPickerRef says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from prefixroute.epp.envoy import bootstrap, skipped_response_body
from prefixroute.epp.protocol import DESTINATION_HEADER
from prefixroute.front.gate import GateSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.tenancy.keys import key_digest
from tests.epp.gateway import Envoy, endpoints, start_envoy, start_epp
from tests.router.backend import FakeEngine, sse_chunks

ROUTING = RoutingConfig(block_size=16, prefix_blocks=2)
PROMPT = "The quick brown fox jumps over the lazy dog. " * 8


@pytest.fixture
async def envoys() -> AsyncIterator[list[Envoy]]:
    started: list[Envoy] = []
    yield started
    for envoy in started:
        await envoy.stop()


async def post(url: str, payload: dict[str, Any] | bytes, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/completions", data=data, headers={"Content-Type": "application/json", **headers}
        ) as resp:
            return resp.status, await resp.read(), dict(resp.headers)


def served(engines: list[FakeEngine]) -> dict[str, int]:
    return {e.name: len(e.received) for e in engines}


@pytest.mark.parametrize("body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
async def test_requests_reach_the_picked_engine_and_a_shared_prefix_stays_on_one(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path, body_mode: str
) -> None:
    fleet = await engines(3)
    epp = await start_epp([e.url for e in fleet], routing=ROUTING)
    try:
        envoys.append(
            envoy := await start_envoy(
                tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet]), body_mode=body_mode
            )
        )
        for i in range(6):
            status, raw, _ = await post(envoy.url, {"model": "m", "prompt": f"{PROMPT} question {i}", "max_tokens": 2})
            assert status == 200, raw
        counts = served(fleet)
        assert sorted(counts.values()) == [0, 0, 6], counts  # one engine took the whole prefix group
        (engine,) = [e for e in fleet if e.received]
        # The engine saw the EPP's choice (itself) in the destination header, and the client's body.
        assert {h[DESTINATION_HEADER] for h in engine.headers} == {f"127.0.0.1:{engine.port}"}
        assert engine.received[0]["prompt"] == f"{PROMPT} question 0"
        # The gateway reported every response back: nothing is left in flight, no prefill queued.
        load = epp.state.load
        assert all(load.get(e.url).in_flight == 0 and load.get(e.url).prefill_units == 0 for e in fleet)
        metrics = epp.state.metrics.render().decode()
        assert (
            f'prefixroute_epp_requests_total{{member="{engine.url}",status="200",strategy="prefix-cache"}} 6.0'
            in metrics
        )
    finally:
        await epp.stop()


async def test_sse_passes_byte_for_byte_and_first_byte_is_seen(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path
) -> None:
    fleet = await engines(2)
    epp = await start_epp([e.url for e in fleet], routing=ROUTING)
    try:
        envoys.append(envoy := await start_envoy(tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet])))
        status, raw, headers = await post(envoy.url, {"model": "m", "prompt": PROMPT, "stream": True})
        (engine,) = [e for e in fleet if e.received]
        assert status == 200
        assert raw == b"".join(sse_chunks(engine.name))
        assert headers["Content-Type"].startswith("text/event-stream")
        assert "prefixroute_epp_time_to_first_byte_seconds_count 1.0" in epp.state.metrics.render().decode()
    finally:
        await epp.stop()


async def test_a_client_set_destination_cannot_steer_outside_the_pool(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path
) -> None:
    fleet = await engines(2)
    (outsider,) = await engines(1)  # listening, reachable, but not in the pool
    epp = await start_epp([e.url for e in fleet], routing=ROUTING)
    try:
        for failure_mode in ("FailClose", "FailOpen"):
            envoys.append(envoy := await start_envoy(
                tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet]), failure_mode=failure_mode))  # fmt: skip
            spoof = f"127.0.0.1:{outsider.port}"
            for _ in range(4):
                status, _, _ = await post(
                    envoy.url, {"model": "m", "prompt": PROMPT}, **{DESTINATION_HEADER: spoof,
                                                                    "x-gateway-destination-endpoint-subset": spoof})  # fmt: skip
                assert status == 200
            assert outsider.received == []
            # ... and the engines never saw the spoofed value either: the header was replaced.
            assert all(h[DESTINATION_HEADER] != spoof for e in fleet for h in e.headers)
        # With the EPP gone and FailOpen, the gateway's fallback still picks only pool members.
        await epp.stop()
        for attempt in range(4):
            status, raw, _ = await post(
                envoy.url, {"model": "m", "prompt": PROMPT}, **{DESTINATION_HEADER: f"127.0.0.1:{outsider.port}"}
            )
            assert status == 200, (attempt, envoy.process.argv, raw)
        assert outsider.received == []
    finally:
        await epp.stop()


async def test_fail_close_answers_a_clear_error_and_fail_open_still_serves(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path
) -> None:
    fleet = await engines(2)
    epp = await start_epp([e.url for e in fleet], routing=ROUTING)
    pool = endpoints([e.url for e in fleet])
    address = f"127.0.0.1:{epp.port}"
    envoys.append(closed := await start_envoy(tmp_path, address, pool, failure_mode="FailClose"))
    envoys.append(opened := await start_envoy(tmp_path, address, pool, failure_mode="FailOpen"))
    for envoy in (closed, opened):
        assert (await post(envoy.url, {"model": "m", "prompt": PROMPT}))[0] == 200
    await epp.stop()  # the endpoint picker is gone
    status, raw, headers = await post(closed.url, {"model": "m", "prompt": PROMPT})
    error = json.loads(raw)["error"]
    assert status == 503
    assert headers["Content-Type"] == "application/json"
    assert error["type"] == "gateway_error"
    assert error["code"].startswith("ext_proc_error_gRPC_error_14")
    before = sum(served(fleet).values())
    for _ in range(4):
        assert (await post(opened.url, {"model": "m", "prompt": PROMPT}))[0] == 200
    assert sum(served(fleet).values()) == before + 4
    assert (await opened.stats("http.gateway.ext_proc.failure_mode_allowed"))[
        "http.gateway.ext_proc.failure_mode_allowed"
    ] >= 4


async def test_the_epps_own_errors_reach_the_client_unchanged(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path
) -> None:
    fleet = await engines(1)
    epp = await start_epp([e.url for e in fleet], routing=ROUTING, max_body_bytes=4096)
    try:
        envoys.append(envoy := await start_envoy(tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet])))
        status, raw, _ = await post(envoy.url, b'{"model": "m", "prompt": 12}')
        assert status == 400
        assert json.loads(raw)["error"]["param"] == "prompt"
        status, raw, _ = await post(envoy.url, {"model": "m", "prompt": "x" * 5000})
        assert status == 413
        assert json.loads(raw)["error"]["code"] == "request_too_large"
        assert fleet[0].received == []
    finally:
        await epp.stop()


@pytest.mark.parametrize("body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
async def test_the_front_door_refuses_through_envoy_and_the_key_never_reaches_an_engine(
    engines: Callable[..., Awaitable[list[FakeEngine]]], envoys: list[Envoy], tmp_path: Path, body_mode: str
) -> None:
    """The gate's answers are the gateway's answers: 401 without a key, 429 with Retry-After
    over a tenant's limit, and a good key is removed before the engine."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(json.dumps([{"sha256": key_digest("sk-1"), "tenant": "one", "maxConcurrent": 1}]))
    fleet = await engines(1)
    fleet[0].behaviour.answer_delay = 1.0  # the first request stays in flight while the second arrives
    epp = await start_epp([e.url for e in fleet], routing=ROUTING, gate=GateSettings(api_keys=str(keys)))
    try:
        envoys.append(
            envoy := await start_envoy(
                tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet]), body_mode=body_mode
            )
        )
        payload = {"model": "m", "prompt": PROMPT, "max_tokens": 2}
        status, raw, sent = await post(envoy.url, payload)
        assert status == 401, raw
        assert json.loads(raw)["error"]["code"] == "invalid_api_key", raw
        assert {k.lower(): v for k, v in sent.items()}["www-authenticate"].startswith("Bearer"), sent
        first = asyncio.ensure_future(post(envoy.url, payload, Authorization="Bearer sk-1"))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if epp.gate.limiter.in_flight("one"):
                break
        status, raw, sent = await post(envoy.url, payload, Authorization="Bearer sk-1")
        assert status == 429, raw
        assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded", raw
        assert int({k.lower(): v for k, v in sent.items()}["retry-after"]) >= 1, sent
        status, raw, _ = await first
        assert status == 200, raw
        assert len(fleet[0].received) == 1
        assert "authorization" not in {k.lower() for k in fleet[0].headers[0]}
        metrics = epp.state.metrics.render().decode()
        assert 'prefixroute_epp_rejected_total{reason="unauthorized"} 1.0' in metrics
        assert 'prefixroute_epp_rejected_total{reason="rate_limited_requests"} 1.0' in metrics
    finally:
        await epp.stop()


async def test_the_picker_scrapes_the_engines_load(
    engines: Callable[..., Awaitable[list[FakeEngine]]], tmp_path: Path
) -> None:
    fleet = await engines(2)
    fleet[0].behaviour.metrics_text = "vllm:num_requests_waiting 3\nvllm:num_requests_running 5\n"
    epp = await start_epp([e.url for e in fleet], routing=ROUTING, scrape_interval=0.05)
    try:
        for _ in range(500):
            if epp.state.load.get(fleet[0].url).engine_running == 5.0:
                break
            await asyncio.sleep(0.02)
        busy, idle = epp.state.load.get(fleet[0].url), epp.state.load.get(fleet[1].url)
        assert (busy.engine_waiting, busy.engine_running) == (3.0, 5.0)
        assert (idle.engine_waiting, idle.engine_running) == (0.0, 0.0)
    finally:
        await epp.stop()


@pytest.mark.parametrize(("body_mode", "messages"), [("BUFFERED", 3), ("FULL_DUPLEX_STREAMED", None)])
async def test_a_whole_answer_skips_its_body_events_where_the_gateway_allows(
    engines: Callable[..., Awaitable[list[FakeEngine]]],
    envoys: list[Envoy],
    tmp_path: Path,
    body_mode: str,
    messages: int | None,
) -> None:
    """With the bootstrap's default (BUFFERED, overrides allowed) a non-streamed request is three
    messages each way — request headers, body, response headers — and still completes, with its
    first byte and status; in FULL_DUPLEX_STREAMED (Envoy ignores overrides) the events come."""
    fleet = await engines(1)
    epp = await start_epp([e.url for e in fleet], routing=ROUTING)
    try:
        envoys.append(
            envoy := await start_envoy(
                tmp_path, f"127.0.0.1:{epp.port}", endpoints([e.url for e in fleet]), body_mode=body_mode
            )
        )
        status, raw, _ = await post(envoy.url, {"model": "m", "prompt": PROMPT, "max_tokens": 2})
        assert status == 200, raw
        assert json.loads(raw)["object"] == "text_completion"
        assert epp.state.load.get(fleet[0].url).in_flight == 0  # finished on its headers
        metrics = epp.state.metrics.render().decode()
        assert f'prefixroute_epp_requests_total{{member="{fleet[0].url}",status="200"' in metrics
        assert "prefixroute_epp_time_to_first_byte_seconds_count 1.0" in metrics
        stats = await envoy.stats("http.gateway.ext_proc.stream_msgs")
        sent, received = (
            stats["http.gateway.ext_proc.stream_msgs_sent"],
            stats["http.gateway.ext_proc.stream_msgs_received"],
        )
        if messages is not None:
            assert (sent, received) == (messages, messages)
        else:
            assert min(sent, received) > 3
    finally:
        await epp.stop()


def test_the_bootstrap_lets_the_picker_skip_a_response_body_only_when_buffered() -> None:
    def ext_proc(**options: Any) -> dict[str, Any]:
        config = bootstrap(listen="127.0.0.1:1", epp="127.0.0.1:2", endpoints=["127.0.0.1:3"], **options)
        manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        return next(f for f in manager["http_filters"] if f["name"] == "envoy.filters.http.ext_proc")["typed_config"]

    default = ext_proc()
    assert default["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert default["processing_mode"]["response_body_mode"] == "STREAMED"
    assert default["allow_mode_override"] is True
    assert default["allowed_override_modes"] == [skipped_response_body("BUFFERED")]
    assert skipped_response_body("BUFFERED")["response_body_mode"] == "NONE"
    for options in ({"body_mode": "FULL_DUPLEX_STREAMED"}, {"response_events": False}):
        assert ext_proc(**options)["allow_mode_override"] is False, options
        assert ext_proc(**options)["allowed_override_modes"] == [], options


def test_bootstrap_refuses_what_no_gateway_could_run() -> None:
    with pytest.raises(ValueError, match="body mode"):
        bootstrap(listen="127.0.0.1:1", epp="127.0.0.1:2", endpoints=["127.0.0.1:3"], body_mode="STREAMED")
    with pytest.raises(ValueError, match="failure mode"):
        bootstrap(listen="127.0.0.1:1", epp="127.0.0.1:2", endpoints=["127.0.0.1:3"], failure_mode="Open")
    with pytest.raises(ValueError, match="at least one endpoint"):
        bootstrap(listen="127.0.0.1:1", epp="127.0.0.1:2", endpoints=[])
    with pytest.raises(ValueError, match="host:port"):
        bootstrap(listen="127.0.0.1:1", epp="127.0.0.1:2", endpoints=["10.0.0.1"])
