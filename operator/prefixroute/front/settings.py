"""What both fronts' settings share, declared and checked once.

`RouterSettings` and `EppSettings` extend `FrontSettings` with what only they have (the
router's upstream client and timeouts; the EPP's gRPC ports). Everything here — where the
fleet comes from, the routing knobs, the front door, precise mode, body limit, ejection,
scrapes, tracing — means the same in both, so it is one field with one default and one
check, and one flag (`front.flags.add_front_arguments`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefixroute.front.body import DEFAULT_MAX_BODY_BYTES
from prefixroute.front.gate import GateSettings
from prefixroute.front.peers import PeerSettings
from prefixroute.front.precise import PreciseSettings
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import OTLP_ENDPOINT, SCRAPE_INTERVAL, TRACE_SAMPLE_RATIO, Knob


def check_knobs(settings: object, knobs: tuple[Knob[object], ...]) -> None:
    """Each knob's value in `settings` against its declaration; the error names the flag."""
    for knob in knobs:
        try:
            knob.check(getattr(settings, knob.name))
        except InvalidKnob as exc:
            raise InvalidKnob(knob.name, f"{knob.flag}: {exc.message}") from None


@dataclass(frozen=True)
class FrontSettings:
    host: str = "127.0.0.1"
    # Exactly one membership source is set: static URLs, a ring file, a PrefixRoutedModel, or
    # (the EPP's flag) a GIE InferencePool.
    backends: tuple[str, ...] = ()
    ring_file: str | None = None
    resource: str | None = None  # "namespace/name" of a PrefixRoutedModel
    inference_pool: str | None = None  # "namespace/name" of a GIE InferencePool
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    gate: GateSettings = field(default_factory=GateSettings)  # API keys, tenant header, limits, fair admission
    precise: PreciseSettings = field(default_factory=PreciseSettings)  # tokenizer and KV events
    peers: PeerSettings = field(default_factory=PeerSettings)  # the other replicas: shared load and history
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    scrape_interval: float = SCRAPE_INTERVAL.default  # seconds between scrapes of engines' /metrics; 0 = off
    eject_seconds: float = 5.0  # a member that failed is skipped this long, doubling per consecutive failure
    eject_max_seconds: float = 60.0
    ring_poll_interval: float = 1.0  # how often a ring file's mtime is checked
    # OpenTelemetry (front/tracing.py): a span per request, exported over OTLP/HTTP to this
    # collector base URL; None: tracing off
    otlp_endpoint: str | None = OTLP_ENDPOINT.default
    trace_sample_ratio: float = TRACE_SAMPLE_RATIO.default  # of requests arriving without a sampling decision

    def __post_init__(self) -> None:
        sources = [s for s in (self.backends, self.ring_file, self.resource, self.inference_pool) if s]
        if len(sources) != 1:
            flags = "--backends, --ring-file or --resource" + (" (or --inference-pool)" if self.inference_pool else "")
            raise ValueError(f"give exactly one of {flags}")
        for flag, value in (("--resource", self.resource), ("--inference-pool", self.inference_pool)):
            if value is not None and value.count("/") != 1:
                raise ValueError(f"{flag} must be NAMESPACE/NAME")
        check_knobs(self, (SCRAPE_INTERVAL, OTLP_ENDPOINT, TRACE_SAMPLE_RATIO))  # type: ignore[arg-type]
        if self.max_body_bytes <= 0:
            raise ValueError("--max-body-bytes must be positive")
        for name in ("eject_seconds", "ring_poll_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")
        if self.eject_max_seconds < self.eject_seconds:
            raise ValueError("--eject-max-seconds must be at least --eject-seconds")
        self.precise.check(self.backends)  # --mode precise needs a tokenizer and events
        self.peers.check()
        if self.trace_sample_ratio != TRACE_SAMPLE_RATIO.default and self.otlp_endpoint is None:
            raise ValueError("--trace-sample-ratio needs --otlp-endpoint (tracing is off without it)")
