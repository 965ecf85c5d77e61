"""The compiled ext_proc transport (`epp.native_ext_proc`) served on loopback and driven by a
real gRPC client: the same replies as the grpc.aio server for the same streams, both body
modes and a refusal; a stream reset after its choice, or while the gate holds it, releases
what it held; Health/Check on its port follows readiness; a message that does not parse ends
only its own stream."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterable

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from prefixroute.epp import native_ext_proc
from prefixroute.epp.health import EXT_PROC_SERVICE, LIVENESS, NOT_SERVING, SERVING
from prefixroute.epp.native_ext_proc import NativeExtProc
from prefixroute.epp.server import EppServer
from prefixroute.epp.settings import EppSettings
from prefixroute.front.gate import GateSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from tests.epp.helpers import (
    BUFFERED,
    DUPLEX,
    body,
    destination,
    headers,
    immediate_error,
    post,
    response_body,
    response_headers,
)
from tests.polling import until

pytestmark = pytest.mark.skipif(
    native_ext_proc.ExtProcServer is None, reason="prefixroute_native not built with ExtProcServer (native/)"
)

CONFIG = RoutingConfig(block_size=16, prefix_blocks=2)
FLEET = Fleet(tuple(Member(f"m{i}", f"http://10.0.0.{i + 1}:8000") for i in range(3)))


def completion(prompt: str) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4}).encode()


async def picker(native: bool, host: str = "127.0.0.1", **gate: object) -> EppServer:
    settings = EppSettings(
        host=host, port=0, health_port=0, metrics_port=0, backends=("http://x",), routing=CONFIG,
        gate=GateSettings(**gate),  # type: ignore[arg-type]
    )  # fmt: skip
    server = EppServer(settings, native=native)
    await server.start()
    server.state.apply_fleet(FLEET)
    await server.readiness.update()
    return server


@pytest.fixture
async def servers() -> AsyncIterator[list[EppServer]]:
    started: list[EppServer] = []
    yield started
    for server in started:
        await server.stop(1)


async def exchange(port: int, messages: Iterable[ext_proc.ProcessingRequest]) -> list[ext_proc.ProcessingResponse]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
        return [reply async for reply in stub.Process(iter(list(messages)), timeout=10)]


def streams() -> list[list[ext_proc.ProcessingRequest]]:
    """Requests as a gateway streams them: duplex and buffered, a body in two pieces, an
    event-stream answer, a whole answer, a body the picker cannot read (a 400)."""
    return [
        [headers(post()), body(completion("a duplex request " * 8)), response_headers(200, content_type="text/event-stream"),
         response_body(b"data: x\n\n"), response_body(b"", end=True)],
        [headers(post(), mode=BUFFERED), body(completion("a buffered request " * 8)), response_headers(200)],
        [headers(post()), body(completion("two pieces " * 8)[:20], end=False), body(completion("two pieces " * 8)[20:]),
         response_headers(200, end=True)],
        [headers(post(), mode=BUFFERED), body(b"{not json")],
    ]  # fmt: skip


async def test_the_same_streams_get_the_same_replies_as_from_grpc_aio(servers: list[EppServer]) -> None:
    compiled, python = await picker(native=True), await picker(native=False)
    servers += [compiled, python]
    assert compiled.native
    assert not python.native
    for messages in streams():
        ours = await exchange(compiled.port, messages)
        theirs = await exchange(python.port, messages)
        assert ours == theirs
        assert ours  # every stream was answered
    # Every request ended with its stream: nothing is left counted on any member.
    await until(lambda: compiled.state.load.total_requests(FLEET.ring.names) == 0, "every request released")
    refused = (await exchange(compiled.port, streams()[-1]))[-1]
    assert immediate_error(refused)[0] == 400


async def test_a_reset_stream_releases_its_member(servers: list[EppServer]) -> None:
    server = await picker(native=True)
    servers.append(server)
    load = server.state.load
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
        call = stub.Process()
        await call.write(headers(post(), mode=DUPLEX))
        await call.write(body(completion("held, then the gateway leaves " * 4)))
        chosen = await call.read()
        assert destination(chosen)[0] is not None
        assert load.total_requests(FLEET.ring.names) == 1  # in flight on the member chosen
        call.cancel()
    await until(lambda: load.total_requests(FLEET.ring.names) == 0, "the reset stream's member released")


async def test_a_stream_reset_while_the_gate_holds_it_leaves_the_waiting_room(servers: list[EppServer]) -> None:
    server = await picker(native=True, max_in_flight_per_member=1, max_waiting=4, max_wait_seconds=30)
    servers.append(server)
    gate = server.gate
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
        holders = []
        for i in range(3):  # every member full
            call = stub.Process()
            await call.write(headers(post(), mode=BUFFERED))
            await call.read()
            await call.write(body(completion(f"filler {i} " * 8)))
            assert destination(await call.read())[0] is not None
            holders.append(call)
        waiting = stub.Process()
        await waiting.write(headers(post(), mode=BUFFERED))
        await waiting.read()
        await waiting.write(body(completion("waits for room " * 8)))
        await until(lambda: gate.admission.waiting == 1, "a request waiting")
        transport = server.ext_proc
        assert transport is not None
        assert transport.open_streams == 4
        waiting.cancel()
        await until(lambda: gate.admission.waiting == 0, "the waiting room empty")
        await until(lambda: transport.open_streams == 3, "the reset stream's exchange closed")
        assert transport.pending() == 0  # no answer is awaited for the stream that left
        # The one that left is not admitted when room comes: the first member freed stays free.
        await holders[0].write(response_headers(200, end=True))
        await holders[0].read()
        await holders[0].done_writing()
        await until(lambda: server.state.load.total_requests(FLEET.ring.names) == 2, "one member freed")
        await asyncio.sleep(0.1)
        assert server.state.load.total_requests(FLEET.ring.names) == 2
        for call in holders[1:]:
            call.cancel()


async def test_health_check_on_the_ext_proc_port_follows_readiness(servers: list[EppServer]) -> None:
    server = await picker(native=True)
    servers.append(server)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)

        async def status(service: str) -> int:
            return int((await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)).status)

        assert await status("") == SERVING
        assert await status(EXT_PROC_SERVICE) == SERVING
        assert await status(LIVENESS) == SERVING
        server.state.apply_fleet(Fleet(()))
        await server.readiness.update()
        assert await status("") == NOT_SERVING
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await status("no-such-service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
async def test_an_ipv6_host_in_brackets_is_served_as_grpc_aio_served_it(servers: list[EppServer]) -> None:
    server = await picker(native=True, host="[::1]")
    servers.append(server)
    async with grpc.aio.insecure_channel(f"[::1]:{server.port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert reply.status == SERVING


async def test_a_message_that_does_not_parse_ends_its_stream_only(servers: list[EppServer]) -> None:
    server = await picker(native=True)
    servers.append(server)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        raw = channel.stream_stream(
            "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for _ in raw(iter([b"\xff\xff\xff"]), timeout=5):
                pass
        assert failed.value.code() == grpc.StatusCode.INTERNAL
        other = channel.unary_unary("/envoy.service.ext_proc.v3.ExternalProcessor/Other")
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await other(b"", timeout=5)
        assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
    replies = await exchange(server.port, [headers(post(), mode=BUFFERED), body(completion("still serving " * 8))])
    assert destination(replies[-1])[0] is not None


class QueuedJobs:
    """The compiled server's side of the queue, faked: the jobs a drain takes, the answers given."""

    def __init__(self) -> None:
        self.jobs: list[tuple[int, int, int, bytes | None, str | None]] = []
        self.answers: dict[int, list[bytes] | None] = {}

    def take(self) -> list[tuple[int, int, int, bytes | None, str | None]]:
        jobs, self.jobs = self.jobs, []
        return jobs

    def answer(self, token: int, replies: list[bytes] | None) -> None:
        self.answers[token] = replies


async def test_a_reset_taken_with_the_message_it_cancels_leaves_nothing_behind(servers: list[EppServer]) -> None:
    """A busy loop may take a gated message and its stream's reset in one drain: the wait is
    cancelled before it starts, and the exchange is still closed."""
    server = await picker(native=True, max_in_flight_per_member=1, max_wait_seconds=30)
    servers.append(server)
    transport = server.ext_proc
    assert transport is not None
    queue = QueuedJobs()
    real, transport._server = transport._server, queue  # the drain's edge, faked: jobs as the server queues them
    try:
        await reset_with_its_message(server, transport, queue)
    finally:
        transport._server = real


async def reset_with_its_message(server: EppServer, transport: NativeExtProc, queue: QueuedJobs) -> None:
    queue.jobs = [(1, 7, native_ext_proc.MESSAGE, headers(post(), mode=BUFFERED).SerializeToString(), "10.0.0.9")]
    transport._drain()
    assert queue.answers[1]  # the headers go on at once
    body_message = body(completion("waits, and its gateway leaves " * 4)).SerializeToString()
    queue.jobs = [(2, 7, native_ext_proc.MESSAGE, body_message, None), (0, 7, native_ext_proc.CANCELLED, None, None)]
    transport._drain()
    await until(lambda: transport.open_streams == 0, "the exchange closed")
    assert 2 not in queue.answers  # nobody waits for it: the stream is gone
    assert server.gate.admission.waiting == 0
    assert server.state.load.total_requests(FLEET.ring.names) == 0


async def test_one_failing_job_does_not_lose_the_others_taken_with_it(servers: list[EppServer]) -> None:
    server = await picker(native=True)
    servers.append(server)
    transport = server.ext_proc
    assert transport is not None
    queue = QueuedJobs()
    real, transport._server = transport._server, queue
    try:
        one_bad_job(transport, queue)
    finally:
        transport._server = real


def one_bad_job(transport: NativeExtProc, queue: QueuedJobs) -> None:
    good = [headers(post(), mode=BUFFERED), body(completion("a request taken after a bad one " * 4))]
    queue.jobs = [(1, 1, native_ext_proc.MESSAGE, b"\xff\xff\xff", None)]
    queue.jobs += [(2 + i, 2, native_ext_proc.MESSAGE, m.SerializeToString(), None) for i, m in enumerate(good[:1])]
    transport._drain()
    queue.jobs = [(3, 2, native_ext_proc.MESSAGE, good[1].SerializeToString(), None)]
    transport._drain()
    assert queue.answers[1] is None  # its stream ends with an error
    answered = ext_proc.ProcessingResponse.FromString(queue.answers[3][0])  # type: ignore[index]
    assert destination(answered)[0] is not None
