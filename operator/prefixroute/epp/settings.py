"""What the EPP's flags mean, gathered in one immutable value (the CLI builds it, tests too)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixroute.front.body import DEFAULT_MAX_BODY_BYTES
from prefixroute.front.gate import GateSettings
from prefixroute.front.precise import PreciseSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import SCRAPE_INTERVAL

DEFAULT_PORT = 9002  # ext_proc: the port an InferencePool's endpointPickerRef names (GIE's default)
DEFAULT_HEALTH_PORT = 9003  # gRPC health for liveness and readiness probes (GIE's default)
DEFAULT_METRICS_PORT = 9090  # Prometheus /metrics over HTTP


@dataclass(frozen=True)
class EppSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    health_port: int = DEFAULT_HEALTH_PORT
    metrics_port: int = DEFAULT_METRICS_PORT  # 0: no metrics server
    # Exactly one membership source is set: static URLs, a ring file, or a PrefixRoutedModel.
    backends: tuple[str, ...] = ()
    ring_file: str | None = None
    resource: str | None = None  # "namespace/name"
    inference_pool: str | None = None  # "namespace/name" of a GIE InferencePool
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    # The front door, as the router's: tenant header, API keys, per-tenant limits, fair admission.
    gate: GateSettings = field(default_factory=GateSettings)
    scrape_interval: float = SCRAPE_INTERVAL.default  # seconds between scrapes of engines' /metrics; 0 = off
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    eject_seconds: float = 5.0  # a member the gateway saw answer 5xx is skipped this long, doubling
    eject_max_seconds: float = 60.0
    ring_poll_interval: float = 1.0
    # Precise mode, as the router's (front/precise.py): the engines' KV events and their tokens.
    precise: PreciseSettings = field(default_factory=PreciseSettings)

    def __post_init__(self) -> None:
        sources = sum(1 for s in (self.backends, self.ring_file, self.resource, self.inference_pool) if s)
        if sources != 1:
            raise ValueError("give exactly one of --backends, --ring-file, --resource or --inference-pool")
        for flag, value in (("--resource", self.resource), ("--inference-pool", self.inference_pool)):
            if value is not None and value.count("/") != 1:
                raise ValueError(f"{flag} must be NAMESPACE/NAME")
        ports = [p for p in (self.port, self.health_port, self.metrics_port) if p]  # 0: any free port
        if len(set(ports)) != len(ports):
            raise ValueError("--port, --health-port and --metrics-port must differ")
        if self.max_body_bytes <= 0:
            raise ValueError("--max-body-bytes must be positive")
        for name in ("eject_seconds", "ring_poll_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")
        try:
            SCRAPE_INTERVAL.check(self.scrape_interval)
        except InvalidKnob as exc:
            raise InvalidKnob(SCRAPE_INTERVAL.name, f"{SCRAPE_INTERVAL.flag}: {exc.message}") from None
        if self.eject_max_seconds < self.eject_seconds:
            raise ValueError("--eject-max-seconds must be at least --eject-seconds")
        self.precise.check(self.backends)  # the router's rules: --mode precise needs a tokenizer and events
