"""The EPP process: an ext_proc gRPC server (compiled, or on grpc.aio), its health, metrics and membership.

`ExternalProcessor.Process` is one bidirectional stream per HTTP request; each message is
answered by that request's `Exchange` (the transport around the front's pipeline,
`front.pipeline`), and when the stream ends — the gateway closes it with the request, or
cancels it when the client leaves — the exchange settles the request's accounting. Everything runs on one event loop, as the router does, so the state needs no lock.
Beside it, as in the router: the front door (`front.gate`, with its API-key file), and the
engine scraper (`front.scrape`, `--scrape-interval`) that feeds the engines' own queues into
the load view, and in precise mode the subscriber to every member's KV cache events
(`front.precise`, started before the membership source so the first fleet is followed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp
import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health_pb2_grpc

from prefixroute.epp.exchange import Exchange
from prefixroute.epp.health import Readiness, serve_metrics
from prefixroute.epp.metrics import PREFIX, EppMetrics
from prefixroute.epp.native_ext_proc import AVAILABLE as NATIVE_EXT_PROC
from prefixroute.epp.native_ext_proc import NativeExtProc
from prefixroute.epp.objectives import InferenceObjectives
from prefixroute.epp.protocol import ProcessingRequest, ProcessingResponse
from prefixroute.epp.settings import EppSettings
from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.ejections import Ejections
from prefixroute.front.gate import TenantGate
from prefixroute.front.gate_metrics import GateMetrics
from prefixroute.front.membership import MembershipSource, source_for
from prefixroute.front.pipeline import Pipeline, request_tracing
from prefixroute.front.scrape import Scraper
from prefixroute.front.state import FrontState
from prefixroute.routing.fleet import Fleet

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from prefixroute.front.tracing import RequestTracing

log = logging.getLogger("prefixroute.epp")

MAX_MESSAGE = 64 * 1024 * 1024  # the largest message taken from the gateway (a whole buffered body)


def epp_state(settings: EppSettings) -> FrontState:
    return FrontState(
        settings.routing,
        EppMetrics(settings.routing.strategy),
        Ejections(settings.eject_seconds, settings.eject_max_seconds),
        precise=settings.precise,
        backends=settings.backends,
        peers=settings.peers,
        host=settings.host,
    )


def peer_address(peer: str) -> str | None:
    """The IP address in a gRPC peer string ('ipv4:10.0.0.7:41234', 'ipv6:[fd00::1]:41234')."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or None
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]") or None
    return None


def gate_for(settings: EppSettings, state: FrontState) -> tuple[TenantGate, ApiKeySource | None]:
    """The router's front door with the EPP's metrics prefix, and the API-key file it reads."""
    gate_settings = settings.gate
    keys = (
        ApiKeySource(gate_settings.api_keys, gate_settings.api_keys_poll_interval) if gate_settings.api_keys else None
    )
    return TenantGate(gate_settings, state, keys, GateMetrics(state.metrics.registry, PREFIX), state.clock), keys


def objectives_follower(settings: EppSettings) -> InferenceObjectives | None:
    """The reader of the pool's InferenceObjectives, when the picker knows its pool."""
    if settings.objectives_of is None:
        return None
    namespace, pool = settings.objectives_of.split("/", 1)
    return InferenceObjectives(namespace, pool, settings.objectives_poll_interval)


class ExternalProcessor(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    async def Process(  # the gRPC method's name
        self, requests: AsyncIterator[ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[ProcessingResponse]:
        pipeline = self.pipeline
        exchange = Exchange(pipeline, None if pipeline.gate.open else peer_address(context.peer()))
        cancelled = True
        try:
            async for message in requests:
                replies = exchange.on_message(message)
                if exchange.pending is not None:  # the gate decides: it may make the request wait
                    replies = await exchange.resolve()
                for reply in replies:
                    yield reply
            cancelled = False
        finally:
            exchange.close(cancelled)


class EppServer:
    """The gRPC servers (ext_proc on `port`, health on `health_port` too), /metrics, and the
    membership source feeding the state; `start` and `stop` bracket them all.

    ext_proc is served by the compiled server (`native_ext_proc`) where it is built, with
    Health/Check on its port too; grpc.aio then serves the health port alone. Without it (or
    with `native=False`) grpc.aio serves both services on both ports."""

    def __init__(
        self,
        settings: EppSettings,
        source: MembershipSource | None = None,
        state: FrontState | None = None,
        tracer_provider: TracerProvider | None = None,
        native: bool = NATIVE_EXT_PROC,
    ) -> None:
        self.settings = settings
        self.native = native
        self.state = state or epp_state(settings)
        self.source = source or source_for(settings)
        self.readiness = Readiness(self.state)
        self.gate, self.keys = gate_for(settings, self.state)
        self.tracing: RequestTracing | None = request_tracing(settings, "epp", tracer_provider)
        self.pipeline = Pipeline(self.state, self.gate, settings.max_body_bytes, self.tracing)
        self.objectives = objectives_follower(settings)
        self._session: aiohttp.ClientSession | None = None
        self._scraper: Scraper | None = None
        self._grpc: grpc.aio.Server | None = None
        self.ext_proc: NativeExtProc | None = None
        self._metrics: asyncio.Server | None = None
        self.port = settings.port  # the bound ports (differ from the settings when those are 0)
        self.health_port = settings.health_port
        self.metrics_port = settings.metrics_port

    def _apply(self, fleet: Fleet) -> None:
        self.state.apply_fleet(fleet)
        asyncio.get_running_loop().create_task(self.readiness.update())

    async def start(self) -> None:
        settings = self.settings
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
        health_pb2_grpc.add_HealthServicer_to_server(self.readiness.servicer, server)
        if self.native:
            self.ext_proc = NativeExtProc(self.pipeline, settings.host, settings.port, MAX_MESSAGE)
            self.readiness.mirrors.append(self.ext_proc.set_health)
            self.port = self.ext_proc.port
        else:
            external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(
                ExternalProcessor(self.pipeline), server
            )
            self.port = server.add_insecure_port(f"{settings.host}:{settings.port}")
        if settings.health_port:
            self.health_port = server.add_insecure_port(f"{settings.host}:{settings.health_port}")
        await self.state.precise.start()
        if self.state.peers is not None:
            await self.state.peers.start()
        await self.source.start(self._apply)
        if self.keys is not None:
            await self.keys.start()
        if self.objectives is not None:
            await self.objectives.start(self.gate.use_api_objectives)
        if settings.scrape_interval > 0:
            self._session = aiohttp.ClientSession()
            self._scraper = Scraper(self.state, self._session, settings.scrape_interval)
            self._scraper.start()
        await self.readiness.start()
        if self.ext_proc is not None:
            await self.ext_proc.start()
        if not self.native or settings.health_port:
            await server.start()
            self._grpc = server
        if settings.metrics_port:
            self._metrics = await serve_metrics(self.state, settings.host, settings.metrics_port)
            self.metrics_port = self._metrics.sockets[0].getsockname()[1]
        log.info(
            "endpoint picker on %s:%d (health %d, metrics %d), strategy %s, mode %s, front door %s, scraping %s, "
            "tracing %s, ext_proc %s",
            settings.host, self.port, self.health_port, self.metrics_port, settings.routing.strategy,
            settings.precise.mode,
            "open" if self.gate.open else "on", f"every {settings.scrape_interval:g} s" if self._scraper else "off",
            "on" if self.tracing is not None else "off", "compiled" if self.native else "grpc.aio",
        )  # fmt: skip

    async def stop(self, grace: float = 5.0) -> None:
        await self.readiness.stop()
        if self.ext_proc is not None:
            await self.ext_proc.stop(grace)
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._metrics is not None:
            self._metrics.close()
            await self._metrics.wait_closed()
        if self._scraper is not None:
            await self._scraper.stop()
        if self._session is not None:
            await self._session.close()
        if self.keys is not None:
            await self.keys.stop()
        if self.objectives is not None:
            await self.objectives.stop()
        await self.state.precise.stop()
        if self.state.peers is not None:
            await self.state.peers.stop()
        await self.source.stop()
        if self.tracing is not None:
            await self.tracing.close()

    async def wait(self) -> None:
        if self.ext_proc is not None:
            await self.ext_proc.wait()
            return
        assert self._grpc is not None
        await self._grpc.wait_for_termination()
