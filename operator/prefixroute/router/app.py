"""The router's HTTP surface and lifecycle.

Routes are registered for every method and check the method themselves, and a
catch-all route answers unknown paths, so 404 and 405 come out OpenAI-shaped
without a middleware on every request. The upstream session, the membership
source and the scraper live and die with the application (`cleanup_ctx`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from prefixroute.front.api_keys import ApiKeySource
from prefixroute.front.gate import TenantGate
from prefixroute.front.gate_metrics import GateMetrics
from prefixroute.front.membership import MembershipSource, source_for
from prefixroute.router import errors
from prefixroute.router.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from prefixroute.router.metrics import PREFIX
from prefixroute.router.native_client import NativeUpstream
from prefixroute.router.proxy import Proxy
from prefixroute.router.scrape import Scraper
from prefixroute.router.settings import RouterSettings
from prefixroute.router.state import RouterState

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from prefixroute.router.tracing import RequestTracing

log = logging.getLogger("prefixroute.router")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STATE_KEY = web.AppKey("state", RouterState)
PROXY_KEY = web.AppKey("proxy", Proxy)


def upstream_session(settings: RouterSettings) -> aiohttp.ClientSession:
    """One pooled keep-alive session for every member: `/v1/models`, scrapes, and forwarding
    with `--upstream-client aiohttp`.

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


def _only(methods: tuple[str, ...], handler: Handler) -> Handler:
    allowed = frozenset(methods)

    async def checked(request: web.Request) -> web.StreamResponse:
        if request.method not in allowed:
            error = errors.MethodNotAllowed(
                f"method {request.method} is not allowed on {request.path}; use {', '.join(methods)}"
            )
            error.headers["Allow"] = ", ".join(methods)
            return error.response()
        return await handler(request)

    return checked


def request_tracing(settings: RouterSettings, provider: TracerProvider | None = None) -> RequestTracing | None:
    """Tracing as the settings ask (None: off, and OpenTelemetry is not even imported), or
    through `provider` (tests hand in one with the SDK's in-memory exporter)."""
    if provider is None and settings.otlp_endpoint is None:
        return None
    from prefixroute.router.tracing import RequestTracing, otlp_provider

    if provider is None:
        assert settings.otlp_endpoint is not None
        provider = otlp_provider(settings.otlp_endpoint, settings.trace_sample_ratio)
        log.info("tracing: a span per request to %s, sampling %g", settings.otlp_endpoint, settings.trace_sample_ratio)
    return RequestTracing(provider, settings.routing.strategy)


def build_app(
    settings: RouterSettings,
    source: MembershipSource | None = None,
    state: RouterState | None = None,
    tracer_provider: TracerProvider | None = None,
) -> web.Application:
    """The router application; `source`, `state` and a `tracer_provider` may be injected by tests."""
    state = state or RouterState(settings)
    source = source or source_for(settings)
    keys = (
        ApiKeySource(settings.gate.api_keys, settings.gate.api_keys_poll_interval) if settings.gate.api_keys else None
    )
    gate = TenantGate(settings.gate, state, keys, GateMetrics(state.metrics.registry, PREFIX), state.clock)
    # aiohttp refuses a longer body while reading it; the proxy maps that to our 413.
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[STATE_KEY] = state

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        session = upstream_session(settings)
        native = native_upstream(settings) if settings.upstream_client == "native" else None
        tracing = request_tracing(settings, tracer_provider)
        proxy = Proxy(state, session, gate, native.post if native is not None else None, tracing)
        app[PROXY_KEY] = proxy
        scraper = Scraper(state, session, settings.scrape_interval)
        await state.precise.start()
        await source.start(state.apply_fleet)
        scraper.start()
        if keys is not None:
            await keys.start()
        try:
            yield
        finally:
            if keys is not None:
                await keys.stop()
            await scraper.stop()
            await state.precise.stop()
            await source.stop()
            if native is not None:
                await native.close()
            await session.close()
            if tracing is not None:
                await tracing.close()

    app.cleanup_ctx.append(lifecycle)

    async def completions(request: web.Request) -> web.StreamResponse:
        return await request.app[PROXY_KEY].generate(request, "completion")

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await request.app[PROXY_KEY].generate(request, "chat")

    async def models(request: web.Request) -> web.StreamResponse:
        return await request.app[PROXY_KEY].models(request)

    async def health(request: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    async def ready(request: web.Request) -> web.StreamResponse:
        members = state.ready_members()
        if not members:
            return errors.NoReadyMember(retry_after=state.retry_after()).response()
        return web.json_response({"status": "ready", "members": len(members), "ring_version": state.fleet.version})

    async def metrics(request: web.Request) -> web.StreamResponse:
        return web.Response(body=state.metrics.render(), headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def not_found(request: web.Request) -> web.StreamResponse:
        return errors.NotFound(f"no such endpoint: {request.method} {request.path}").response()

    routes: list[tuple[str, tuple[str, ...], Handler]] = [
        ("/v1/completions", ("POST",), completions),
        ("/v1/chat/completions", ("POST",), chat_completions),
        ("/v1/models", ("GET",), models),
        ("/health", ("GET", "HEAD"), health),
        ("/ready", ("GET", "HEAD"), ready),
        ("/metrics", ("GET",), metrics),
    ]
    for path, methods, handler in routes:
        app.router.add_route("*", path, _only(methods, handler))
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
