"""The EPP's probes and /metrics on real loopback servers: gRPC health answered by a grpc.aio
server as kubelet's probe asks it, readiness following the fleet and ejections (also without a
request), and the one-route HTTP server for Prometheus read over a raw socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from prefixroute.epp.health import EXT_PROC_SERVICE, LIVENESS, NOT_SERVING, SERVING, Readiness, serve_metrics
from prefixroute.epp.metrics import EppMetrics
from prefixroute.front.ejections import Ejections
from prefixroute.front.state import FrontState
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from tests.polling import until

CONFIG = RoutingConfig(block_size=8)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def state_of(clock: Clock, *names: str) -> FrontState:
    state = FrontState(CONFIG, EppMetrics(CONFIG.strategy), Ejections(5.0, 60.0), clock)
    state.apply_fleet(Fleet(tuple(Member(n, f"http://{n}:8000") for n in names), CONFIG.virtual_nodes))
    return state


Check = Callable[[str], Awaitable[int]]


@pytest.fixture
async def probe() -> AsyncIterator[Callable[[Readiness], Awaitable[Check]]]:
    """Serve a Readiness's servicer on a loopback gRPC server; returns a check of one service."""
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []

    async def serve(readiness: Readiness) -> Check:
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(readiness.servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        stub = health_pb2_grpc.HealthStub(channel)

        async def check(service: str) -> int:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            return int(reply.status)

        return check

    yield serve
    for channel in channels:
        await channel.close()
    for server in servers:
        await server.stop(None)


async def test_ready_while_a_member_is_routable_and_alive_regardless(probe) -> None:
    readiness = Readiness(state_of(Clock(), "e0"), interval=3600)
    check = await probe(readiness)
    await readiness.start()
    try:
        assert await check("") == SERVING
        assert await check(EXT_PROC_SERVICE) == SERVING  # the service's own name, as some gateways ask
        assert await check(LIVENESS) == SERVING
    finally:
        await readiness.stop()


async def test_no_member_is_not_ready_but_alive(probe) -> None:
    readiness = Readiness(state_of(Clock()), interval=3600)
    check = await probe(readiness)
    await readiness.start()
    try:
        assert (await check(""), await check(EXT_PROC_SERVICE)) == (NOT_SERVING, NOT_SERVING)
        assert await check(LIVENESS) == SERVING  # a picker without members is not a dead process
    finally:
        await readiness.stop()


async def test_an_unknown_service_is_not_found(probe) -> None:
    readiness = Readiness(state_of(Clock(), "e0"), interval=3600)
    check = await probe(readiness)
    await readiness.start()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await check("some.other.Service")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await readiness.stop()


async def test_readiness_follows_the_fleet_when_updated(probe) -> None:
    state = state_of(Clock(), "e0")
    readiness = Readiness(state, interval=3600)
    check = await probe(readiness)
    await readiness.start()
    try:
        state.apply_fleet(Fleet((), CONFIG.virtual_nodes))
        assert await check("") == SERVING  # not recomputed yet
        await readiness.update()
        assert await check("") == NOT_SERVING
        state.apply_fleet(Fleet((Member("e1", "http://e1:8000"),), CONFIG.virtual_nodes))
        await readiness.update()
        assert await check("") == SERVING
    finally:
        await readiness.stop()


async def test_an_expired_ejection_brings_the_picker_back_without_a_request(probe) -> None:
    clock = Clock()
    state = state_of(clock, "e0")
    readiness = Readiness(state, interval=0.01)
    check = await probe(readiness)
    await readiness.start()
    try:
        state.failed(state.fleet.by_name["e0"])  # ejected for 5 s of the test's clock
        await until(lambda: readiness._ready is False, "readiness noticing the ejection")
        assert await check("") == NOT_SERVING
        clock.now += 5
        await until(lambda: readiness._ready is True, "readiness noticing the ejection's end")
        assert await check("") == SERVING
    finally:
        await readiness.stop()


async def test_a_failing_update_does_not_stop_later_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    state = state_of(Clock(), "e0")
    readiness = Readiness(state, interval=0.01)
    await readiness.start()
    calls = []
    ready_members = state.ready_members

    def flaky() -> list[Member]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in one update")
        return [] if len(calls) >= 3 else ready_members()

    monkeypatch.setattr(state, "ready_members", flaky)
    try:
        await until(lambda: readiness._ready is False, "an update after the one that failed")
    finally:
        await readiness.stop()


async def test_stop_ends_the_updates_and_the_health_service(probe) -> None:
    state = state_of(Clock(), "e0")
    readiness = Readiness(state, interval=0.01)
    check = await probe(readiness)
    await readiness.start()
    task = readiness._task
    await readiness.stop()
    assert task is not None
    assert task.cancelled()
    assert await check(LIVENESS) == NOT_SERVING  # graceful shutdown: every service says so


# -- /metrics ---------------------------------------------------------------------------------


@pytest.fixture
async def metrics_server() -> AsyncIterator[tuple[FrontState, int]]:
    state = state_of(Clock(), "e0", "e1")
    server = await serve_metrics(state, "127.0.0.1", 0)
    yield state, server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def ask(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await reader.read()  # the server closes after one answer
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    return status, dict(line.split(": ", 1) for line in lines), body


async def test_metrics_are_the_states_own(metrics_server: tuple[FrontState, int]) -> None:
    state, port = metrics_server
    state.metrics.request_done("e0", 200)
    status, headers, body = await ask(port, b"GET /metrics HTTP/1.1\r\nHost: epp\r\nAccept: */*\r\n\r\n")
    assert status == "HTTP/1.1 200 OK"
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert headers["Connection"] == "close"
    assert int(headers["Content-Length"]) == len(body)
    text = body.decode()
    assert 'prefixroute_epp_requests_total{member="e0",status="200",strategy="prefix-cache"} 1.0' in text
    assert "prefixroute_epp_ring_members 2.0" in text


async def test_a_query_string_still_names_metrics_and_bare_newlines_are_accepted(
    metrics_server: tuple[FrontState, int],
) -> None:
    _, port = metrics_server
    status, _, body = await ask(port, b"GET /metrics?name[]=x HTTP/1.0\n\n")
    assert status == "HTTP/1.1 200 OK"
    assert b"prefixroute_epp_ring_members" in body


@pytest.mark.parametrize(
    "request_line", [b"GET / HTTP/1.1", b"GET /metricsx HTTP/1.1", b"POST /metrics HTTP/1.1", b"garbage"]
)
async def test_anything_else_is_not_found(metrics_server: tuple[FrontState, int], request_line: bytes) -> None:
    _, port = metrics_server
    status, headers, body = await ask(port, request_line + b"\r\n\r\n")
    assert status == "HTTP/1.1 404 Not Found"
    assert body == b"not found\n"
    assert int(headers["Content-Length"]) == len(body)


async def test_a_client_that_leaves_early_does_not_break_the_server(metrics_server: tuple[FrontState, int]) -> None:
    _, port = metrics_server
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metr")
    writer.close()
    await writer.wait_closed()
    status, _, _ = await ask(port, b"GET /metrics HTTP/1.1\r\n\r\n")
    assert status == "HTTP/1.1 200 OK"
