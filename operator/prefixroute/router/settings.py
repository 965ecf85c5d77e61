"""What the router's flags mean, gathered in one immutable value.

The CLI builds it from argv and tests build it directly, so the server never
reads argparse namespaces or the environment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixroute.front.body import DEFAULT_MAX_BODY_BYTES
from prefixroute.front.gate import GateSettings
from prefixroute.front.precise import PreciseSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import (
    HOLD_SECONDS,
    MAX_HELD_REQUESTS,
    OTLP_ENDPOINT,
    RETRIES,
    SCRAPE_INTERVAL,
    TRACE_SAMPLE_RATIO,
)

UPSTREAM_CLIENTS = ("native", "aiohttp")


@dataclass(frozen=True)
class RouterSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    # Exactly one membership source is set: static URLs, a ring file, or a PrefixRoutedModel.
    backends: tuple[str, ...] = ()
    ring_file: str | None = None
    resource: str | None = None  # "namespace/name"
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    gate: GateSettings = field(default_factory=GateSettings)  # API keys, tenant header, limits, fair admission
    retries: int = RETRIES.default  # extra attempts on other members before the first byte
    hold_seconds: float = HOLD_SECONDS.default  # how long a request waits for a member when none is routable
    max_held_requests: int = MAX_HELD_REQUESTS.default
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    scrape_interval: float = SCRAPE_INTERVAL.default  # seconds between scrapes of engines' /metrics; 0 = off
    connect_timeout: float = 3.0
    # Longest silence tolerated from an engine: before its response head (a non-streamed
    # completion is silent until it is done) and between chunks of a stream.
    read_timeout: float = 600.0
    eject_seconds: float = 5.0  # first ejection; doubles per consecutive failure
    eject_max_seconds: float = 60.0
    ring_poll_interval: float = 1.0  # how often a ring file's mtime is checked
    max_connections: int = 4096  # upstream pool size, all members together
    # Shorter than the engines' own keep-alive (uvicorn, under vLLM, closes idle
    # connections after 5 s), so the router never reuses a socket the engine is closing.
    upstream_keepalive: float = 4.0
    member_header: bool = True  # add X-Prefixroute-Member to responses
    # "native" (native_client: httptools-parsed keep-alive HTTP/1.1, the same behaviour and
    # errors at much less CPU per request; see docs/router.md) or "aiohttp" (ClientSession),
    # kept as a fallback
    upstream_client: str = "native"
    precise: PreciseSettings = field(default_factory=PreciseSettings)  # tokenizer and KV events
    # OpenTelemetry (router/tracing.py): a span per request, exported over OTLP/HTTP to this
    # collector base URL; None: tracing off
    otlp_endpoint: str | None = OTLP_ENDPOINT.default
    trace_sample_ratio: float = TRACE_SAMPLE_RATIO.default  # of requests arriving without a sampling decision

    def __post_init__(self) -> None:
        sources = sum(1 for s in (self.backends, self.ring_file, self.resource) if s)
        if sources != 1:
            raise ValueError("give exactly one of --backends, --ring-file or --resource")
        if self.resource is not None and self.resource.count("/") != 1:
            raise ValueError("--resource must be NAMESPACE/NAME")
        # the router's own knobs
        for knob in (RETRIES, SCRAPE_INTERVAL, HOLD_SECONDS, MAX_HELD_REQUESTS, OTLP_ENDPOINT, TRACE_SAMPLE_RATIO):
            try:
                knob.check(getattr(self, knob.name))
            except InvalidKnob as exc:
                raise InvalidKnob(knob.name, f"{knob.flag}: {exc.message}") from None
        if self.max_body_bytes <= 0:
            raise ValueError("--max-body-bytes must be positive")
        for name in ("connect_timeout", "read_timeout", "eject_seconds", "ring_poll_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive")
        if self.eject_max_seconds < self.eject_seconds:
            raise ValueError("--eject-max-seconds must be at least --eject-seconds")
        if self.upstream_client not in UPSTREAM_CLIENTS:
            raise ValueError(f"--upstream-client must be one of {', '.join(UPSTREAM_CLIENTS)}")
        if self.max_connections <= 0:
            raise ValueError("--max-connections must be positive")
        self.precise.check(self.backends)
        if self.trace_sample_ratio != TRACE_SAMPLE_RATIO.default and self.otlp_endpoint is None:
            raise ValueError("--trace-sample-ratio needs --otlp-endpoint (tracing is off without it)")
