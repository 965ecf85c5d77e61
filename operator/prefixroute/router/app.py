"""The router's endpoints and lifecycle.

One table maps each path to its methods and handler; an unknown path is a 404 and a
wrong method a 405 (with `Allow`), both OpenAI-shaped. The upstream clients, the
membership source, the scraper and the request pipeline (`front.pipeline`, which the
proxy transports) live and die with the application (`start`, `stop`). The HTTP server
under it is the router's own (`http_server`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import aiohttp

from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.gate import TenantGate
from prefixroute.front.gate_metrics import GateMetrics
from prefixroute.front.membership import MembershipSource, source_for
from prefixroute.front.pipeline import Pipeline, request_tracing
from prefixroute.front.scrape import Scraper
from prefixroute.router import errors
from prefixroute.router.aiohttp_upstream import AiohttpUpstream
from prefixroute.router.exchange import Answer, Request, Response, error_answer
from prefixroute.router.http_server import HttpServer, ServerLimits
from prefixroute.router.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from prefixroute.router.metrics import PREFIX
from prefixroute.router.native_client import NativeUpstream
from prefixroute.router.proxy import Proxy
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from prefixroute.front.tracing import RequestTracing
    from prefixroute.router.upstream import Upstream

log = logging.getLogger("prefixroute.router")

Handler = Callable[[Request], Awaitable[Answer]]


def upstream_session(settings: RouterSettings) -> aiohttp.ClientSession:
    """One pooled keep-alive session for every member: scrapes, and forwarding with
    `--upstream-client aiohttp`.

    Bodies are relayed undecoded (`auto_decompress=False`), no cookies are kept,
    and aiohttp's own User-Agent and Accept-Encoding are not added, so the engine
    sees the client's. Timeouts: `sock_connect` for a dead address, `sock_read`
    for an engine that stops talking; no total limit, since a long generation
    is not a failure.
    """
    connector = aiohttp.TCPConnector(
        limit=settings.max_connections,
        limit_per_host=0,
        keepalive_timeout=settings.upstream_keepalive,
        ttl_dns_cache=10,
    )
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=settings.read_timeout,  # includes waiting for a free pooled connection
        sock_connect=settings.connect_timeout,
        sock_read=settings.read_timeout,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        read_bufsize=2**16,
    )


def native_upstream(settings: RouterSettings) -> NativeUpstream:
    """The default forwarding client (`--upstream-client native`), with the same limits and timeouts."""
    return NativeUpstream(
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        keepalive=settings.upstream_keepalive,
        limit=settings.max_connections,
    )


_JSON = "application/json"


async def _answered(answer: Answer) -> Answer:
    """An answer known at once, as the awaitable the HTTP server takes."""
    return answer


def _json(value: object, status: int = 200) -> Response:
    return Response(status, json.dumps(value).encode(), content_type=_JSON)


class RouterApp:
    """The router: its state, its endpoints, and what lives as long as it runs (the upstream
    clients, the membership source, the scraper, precise mode, the key file).

    `handle` is the HTTP server's handler (`http_server.HttpServer`): one table lookup by
    path, a method check, then the endpoint. `start` and `stop` bracket a run."""

    def __init__(
        self,
        settings: RouterSettings,
        source: MembershipSource,
        state: RouterState,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.settings = settings
        self.tracer_provider = tracer_provider
        self.source = source
        self.state = state
        self.keys = (
            ApiKeySource(settings.gate.api_keys, settings.gate.api_keys_poll_interval)
            if settings.gate.api_keys
            else None
        )
        self.gate = TenantGate(
            settings.gate, state, self.keys, GateMetrics(state.metrics.registry, PREFIX), state.clock
        )
        self.proxy: Proxy | None = None
        self._session: aiohttp.ClientSession | None = None
        self._upstream: Upstream | None = None
        self._scraper: Scraper | None = None
        self._tracing: RequestTracing | None = None
        self.routes: dict[str, tuple[tuple[str, ...], Handler]] = {
            "/v1/completions": (("POST",), self._completions),
            "/v1/chat/completions": (("POST",), self._chat_completions),
            "/v1/models": (("GET",), self._models),
            "/health": (("GET", "HEAD"), self._health),
            "/ready": (("GET", "HEAD"), self._ready),
            "/metrics": (("GET",), self._metrics),
        }

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        settings, state = self.settings, self.state
        self._session = session = upstream_session(settings)
        self._upstream = upstream = (
            native_upstream(settings) if settings.upstream_client == "native" else AiohttpUpstream(session)
        )
        self._tracing = tracing = request_tracing(settings, "router", self.tracer_provider)
        pipeline = Pipeline(state, self.gate, settings.max_body_bytes, tracing, settings.retries)
        self.proxy = Proxy(state, pipeline, upstream)
        self._scraper = Scraper(state, session, settings.scrape_interval)
        await state.precise.start()
        if state.peers is not None:
            await state.peers.start()
        await self.source.start(state.apply_fleet)
        self._scraper.start()
        if self.keys is not None:
            await self.keys.start()

    async def stop(self) -> None:
        if self.keys is not None:
            await self.keys.stop()
        if self._scraper is not None:
            await self._scraper.stop()
        await self.state.precise.stop()
        if self.state.peers is not None:
            await self.state.peers.stop()
        await self.source.stop()
        if self._upstream is not None:
            await self._upstream.close()
        if self._session is not None:
            await self._session.close()
        if self._tracing is not None:
            await self._tracing.close()

    # -- requests ---------------------------------------------------------------------

    def handle(self, request: Request) -> Awaitable[Answer]:
        # A plain function handing back the endpoint's coroutine, not a coroutine awaiting it:
        # each resumption of a request's coroutine chain passes through every frame in it (11
        # times for router-bench's streamed answer), so this frame cost a call each time.
        route = self.routes.get(request.path)
        if route is None:
            return _answered(error_answer(errors.NotFound(f"no such endpoint: {request.method} {request.path}")))
        methods, handler = route
        if request.method not in methods:
            error = errors.MethodNotAllowed(
                f"method {request.method} is not allowed on {request.path}; use {', '.join(methods)}"
            )
            error.headers["Allow"] = ", ".join(methods)
            return _answered(error_answer(error))
        return handler(request)

    def _proxy(self) -> Proxy:
        if self.proxy is None:
            raise RuntimeError("the router has not been started")
        return self.proxy

    # Plain functions handing back the proxy's coroutine: one frame fewer on every request.
    def _completions(self, request: Request) -> Awaitable[Answer]:
        return self._proxy().generate(request, "completion")

    def _chat_completions(self, request: Request) -> Awaitable[Answer]:
        return self._proxy().generate(request, "chat")

    async def _models(self, request: Request) -> Answer:
        return await self._proxy().models(request)

    async def _health(self, request: Request) -> Answer:
        return _json({"status": "ok"})

    async def _ready(self, request: Request) -> Answer:
        state = self.state
        members = state.ready_members()
        if not members:
            return error_answer(errors.NoReadyMember(retry_after=state.retry_after()))
        return _json({"status": "ready", "members": len(members), "ring_version": state.fleet.version})

    async def _metrics(self, request: Request) -> Answer:
        return Response(200, self.state.metrics.render(), content_type=METRICS_CONTENT_TYPE)


def build_app(
    settings: RouterSettings,
    source: MembershipSource | None = None,
    state: RouterState | None = None,
    tracer_provider: TracerProvider | None = None,
) -> RouterApp:
    """The router; `source`, `state` and a `tracer_provider` may be injected by tests. A bad key
    file fails here."""
    return RouterApp(settings, source or source_for(settings), state or RouterState(settings), tracer_provider)


def http_server(app: RouterApp, access_log: logging.Logger | None = None) -> HttpServer:
    """The HTTP server that serves `app`, with the router's body limit."""
    return HttpServer(app.handle, ServerLimits(max_body_bytes=app.settings.max_body_bytes), access_log)


class RunningRouter:
    """A router serving on a port (tests, benches): `start_router(...)`, then `close()`."""

    def __init__(self, app: RouterApp, server: HttpServer, port: int) -> None:
        self.app = app
        self.server = server
        self.port = port

    async def close(self, grace: float = 0.1) -> None:
        await self.server.close(grace)
        await self.app.stop()


async def start_router(app: RouterApp, host: str = "127.0.0.1", port: int = 0, backlog: int = 2048) -> RunningRouter:
    """Start `app` and serve it on host:port (0: a free port)."""
    await app.start()
    server = http_server(app)
    try:
        bound = await server.start(host, port, backlog)
    except BaseException:
        await app.stop()
        raise
    return RunningRouter(app, server, bound)
