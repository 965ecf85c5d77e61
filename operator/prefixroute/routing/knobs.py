"""Every routing knob, declared once: name, type, default, bounds, help, CRD key and flag.

A knob is a setting a user may turn: a flag of `prefixroute router` (and of the bench and
any other front), a field of the CRD's `spec`, an argument the operator renders. Written
out by hand in each of those places, the copies drift apart — a default here, a bound
there. So each knob is one `Knob` record below, and the rest is derived from it:

- `RoutingConfig` (routing/config.py) takes its defaults from these records and checks
  every value against them;
- the flags: `routing/flags.py` (`add_routing_arguments`, `routing_config_from_args`);
- the operator's reading of `spec.routing` and the router arguments it renders
  (controller/spec/routing.py, controller/builders/router.py);
- the CRD's schema for these fields and the knob table of docs/router.md, written by
  `python -m prefixroute.controller.crd_schema` (a test fails when the committed files
  differ from what it would write).

To add a knob: declare it in `KNOBS` below (its place in the tuple is its place in the
CRD and in the operator's rendered arguments), add the field of the same name to
`RoutingConfig` with `= THE_KNOB.default`, run the generator, and read it where the
routing core needs it. tests/routing/test_knobs.py checks every surface against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from prefixroute.routing.errors import InvalidKnob

T = TypeVar("T")

STRATEGY_NAMES = ("prefix-cache", "prefix-hash", "least-load", "round-robin")


@dataclass(frozen=True)
class Knob(Generic[T]):
    """One setting as every surface spells it.

    `owner` says where the value lives: "routing" is a field of `RoutingConfig` named
    `name`; "front" is a setting of the processes in front of the engines, not of the
    routing core — a field of that name in the router's `RouterSettings`, its front
    door's `GateSettings` (the tenant header, which `EppSettings` has too) or its precise
    mode's `PreciseSettings` (the mode), and in the
    operator's view of the knob's spec section (`RoutingSpec`, `RouterSpec`). Such a knob
    is checked where its settings are built (`knob_from_args`, the settings' own checks).
    """

    name: str  # the field in RoutingConfig (owner "routing") or the front's settings
    kind: type  # int, float, bool or str: the value's type on every surface
    default: T  # None: unset (the flag and the CRD field are optional)
    help: str  # one sentence for --help, the CRD's description and the docs table
    flag: str  # for a bool, the flag that turns the default over
    crd: str | None = None  # "section.key" under spec (e.g. "routing.loadFactor"); None: a flag only
    minimum: float | None = None  # inclusive
    maximum: float | None = None  # inclusive
    choices: tuple[str, ...] = ()
    max_length: int | None = None
    pattern: str | None = None  # a regular expression the value must match (anchored, as OpenAPI reads it)
    # When set, the CRD states the minimum as a CEL rule whose message gives this reason
    # after "SECTION.KEY must be at least MINIMUM: " (instead of OpenAPI's bare wording).
    minimum_reason: str | None = None
    # False: the CRD gives no default, so the operator renders the flag only when the user
    # sets the field and the front's own default applies otherwise.
    crd_default: bool = True
    owner: Literal["routing", "front"] = "routing"

    @property
    def words(self) -> str:
        """The knob's name as error messages say it: "load factor"."""
        return self.name.replace("_", " ")

    @property
    def crd_section(self) -> str:
        """The object under spec that holds the field: "routing", or "router.tracing" for a
        field of a nested object."""
        return self.crd.rsplit(".", 1)[0] if self.crd else ""

    @property
    def crd_key(self) -> str:
        return self.crd.rsplit(".", 1)[1] if self.crd else ""

    def check(self, value: Any) -> None:
        """Raise InvalidKnob unless `value` is one this knob allows (None only when that is the default)."""
        if value is None and self.default is None:
            return
        if not _is_kind(value, self.kind):
            raise InvalidKnob(self.name, f"{self.words} must be {_KIND_WORDS[self.kind]}, not {value!r}")
        if self.choices and value not in self.choices:
            raise InvalidKnob(self.name, f"unknown {self.words} {value!r}; choose one of {', '.join(self.choices)}")
        if self.minimum is not None and not value >= self.minimum:  # `not >=` also refuses NaN
            raise InvalidKnob(self.name, f"{self.words} must be at least {self.minimum}")
        if self.maximum is not None and not value <= self.maximum:
            raise InvalidKnob(self.name, f"{self.words} must be at most {self.maximum}")
        if self.max_length is not None and len(value) > self.max_length:
            raise InvalidKnob(self.name, f"{self.words} must be at most {self.max_length} characters")
        if self.pattern is not None and not re.search(self.pattern, value):
            raise InvalidKnob(self.name, f"{self.words} {value!r} must match {self.pattern}")


_KIND_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _is_kind(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


STRATEGY: Knob[str] = Knob(
    "strategy",
    str,
    "prefix-cache",
    "How a replica is chosen: prefix-cache (the longest cached prefix, scored against the prefill queued "
    "there, within a bounded load), prefix-hash (consistent hashing with bounded loads), least-load or "
    "round-robin.",
    "--strategy",
    crd="routing.strategy",
    choices=STRATEGY_NAMES,
)
MODE: Knob[str] = Knob(
    "mode",
    str,
    "approximate",
    "How routers know what each replica caches: precise (every router follows every engine's KV cache "
    "events and keys requests by the engine's own tokens, so all router replicas agree) or approximate "
    "(each router remembers what it sent where). Unset: precise for sim engines and for vllm engines whose "
    "model (or --tokenizer) is a hub id, whose tokenizer files the routers fetch with the engine's HF_TOKEN, "
    "or a folder the router can mount; approximate otherwise (sglang and custom engines: docs/operator.md "
    "says why).",
    "--mode",
    crd="routing.mode",
    choices=("approximate", "precise"),
    crd_default=False,
    owner="front",
)
BLOCK_SIZE: Knob[int] = Knob(
    "block_size",
    int,
    256,  # characters; about 64 tokens of English text
    "Characters per hashed prompt block; with a tokenizer, tokens per block as the engine cuts them "
    "(then the engine's block size by default).",
    "--block-size",
    crd="routing.blockSize",
    minimum=1,
    maximum=65536,
)
PREFIX_BLOCKS: Knob[int] = Knob(
    "prefix_blocks",
    int,
    4,  # 4 x 256 characters, about 256 tokens
    "Blocks in the affinity key of prefix-hash (and of the ring's tie-breaks).",
    "--prefix-blocks",
    crd="routing.prefixBlocks",
    minimum=1,
    maximum=4096,
)
LOAD_FACTOR: Knob[float] = Knob(
    "load_factor",
    float,
    1.25,
    "Bounded-load factor: a replica above this times its fair share of the load takes no affinity traffic.",
    "--load-factor",
    crd="routing.loadFactor",
    minimum=1.0,
    maximum=100,
    minimum_reason="a replica may take up to loadFactor times the mean load before requests pass it by",
)
LOAD_SLACK: Knob[int] = Knob(
    "load_slack",
    int,
    # At low load the relative bound alone (1.25 x 0.5 requests) would split every session.
    # Chosen in simulation of the Mooncake trace (docs/benchmarks.md): 0 gave 20.7% hits, 3 gave 32%.
    3,
    "A replica may always hold its fair share plus this many requests, so at low load the relative bound "
    "does not split sessions.",
    "--load-slack",
    crd="routing.loadSlack",
    minimum=0,
    maximum=1024,
)
QUEUE_PENALTY: Knob[float] = Knob(
    "queue_penalty",
    float,
    # Below 1 because a cache hit also spares the engine work that later requests would
    # queue behind. 0.4 in simulation of the Mooncake trace (docs/benchmarks.md, "The queue
    # penalty"): precise mode's hit rate is flat from 0.3 to 0.4 and 0.8-1.0 points lower from
    # 0.45 up (approximate's 0.2-0.3 lower), TTFT p99 flat from 0.3 to 0.5; 0.3 cost p99 on
    # bench fleet's 64 replicas.
    0.4,
    "prefix-cache only: weight of the prefill already queued on a replica against the prefill its cache "
    "would save (both in prompt units).",
    "--queue-penalty",
    crd="routing.queuePenalty",
    minimum=0,
    maximum=100,
)
VIRTUAL_NODES: Knob[int] = Knob(
    "virtual_nodes",
    int,
    256,
    "Points per replica of weight 1 on the consistent-hash ring.",
    "--virtual-nodes",
    crd="routing.virtualNodes",
    minimum=1,
    maximum=65536,
)
TENANT_HEADER: Knob[str | None] = Knob(
    "tenant_header",
    str,
    None,
    "Request header naming the tenant, e.g. X-Tenant (without it the API key identifies the tenant).",
    "--tenant-header",
    crd="routing.tenantHeader",
    max_length=128,
    pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",  # an HTTP header name (RFC 9110 token)
    owner="front",
)
ISOLATE_TENANTS: Knob[bool] = Knob(
    "isolate_tenants",
    bool,
    False,
    "Salt every prefix hash with the tenant and pass cache_salt to the engine, so tenants never share KV blocks.",
    "--isolate-tenants",
    crd="routing.isolateTenants",
)
RETRIES: Knob[int] = Knob(
    "retries",
    int,
    2,
    "Other replicas the router tries, before the first byte, when one fails.",
    "--retries",
    crd="router.retries",
    minimum=0,
    maximum=10,
    crd_default=False,
    owner="front",
)
SCRAPE_INTERVAL: Knob[float] = Knob(
    "scrape_interval",
    float,
    0.0,
    "Seconds between scrapes of each engine's /metrics, whose queue gauges feed the load view (0: off).",
    "--scrape-interval",
    minimum=0,
    owner="front",
)
HOLD_SECONDS: Knob[float] = Knob(
    "hold_seconds",
    float,
    0.0,
    "Seconds a request waits for an engine when none is ready (a model scaled to zero wakes on held "
    "requests), then 503 with Retry-After; 0: answer 503 at once. The operator holds 60 s for a model "
    "whose autoscaling may scale to zero, unless this is set.",
    "--hold-seconds",
    crd="router.holdSeconds",
    minimum=0,
    maximum=3600,
    crd_default=False,
    owner="front",
)
MAX_HELD_REQUESTS: Knob[int] = Knob(
    "max_held_requests",
    int,
    256,
    "Most requests held at once while no engine is ready; more are answered 503 at once.",
    "--max-held-requests",
    crd="router.maxHeldRequests",
    minimum=1,
    maximum=100000,
    crd_default=False,
    owner="front",
)
# Fair sharing at the front door (front/gate.py, tenancy/admission.py): values of the router's
# GateSettings. No CRD defaults: the operator renders a flag only for a field the user set,
# so the router's own defaults, which the fairness bench tunes, apply otherwise.
MAX_IN_FLIGHT_PER_MEMBER: Knob[int] = Knob(
    "max_in_flight_per_member",
    int,
    0,
    "Fair sharing: requests each engine may hold before new ones wait at the router, where freed "
    "capacity goes to the tenants fairly (0: off, every request goes straight on).",
    "--max-in-flight-per-member",
    crd="router.fairSharing.maxInFlightPerEngine",
    minimum=0,
    maximum=100000,
    crd_default=False,
    owner="front",
)
MAX_WAITING: Knob[int] = Knob(
    "max_waiting",
    int,
    1024,
    "Fair sharing: requests that may wait at one router at once in each priority band; more are refused "
    "with 503, Retry-After and X-Prefixroute-Shed-Reason: queue-full.",
    "--max-waiting",
    crd="router.fairSharing.maxWaiting",
    minimum=0,
    maximum=1000000,
    crd_default=False,
    owner="front",
)
MAX_WAIT_SECONDS: Knob[float] = Knob(
    "max_wait_seconds",
    float,
    30.0,
    "Fair sharing: the longest a request waits for room (its time to live in its band) before it is refused "
    "with 503, Retry-After and X-Prefixroute-Shed-Reason: queue-ttl.",
    "--max-wait-seconds",
    crd="router.fairSharing.maxWaitSeconds",
    minimum=0.1,
    maximum=3600,
    crd_default=False,
    owner="front",
)
RESERVE_PER_TENANT: Knob[int] = Knob(
    "reserve_per_tenant",
    int,
    3,  # the bench fairness's choice (docs/benchmarks.md); GateSettings' default, which tests hold equal
    "Fair sharing: slots a tenant over its fair share leaves free on each engine for every other active tenant.",
    "--reserve-per-tenant",
    crd="router.fairSharing.reservePerTenant",
    minimum=0,
    maximum=1024,
    crd_default=False,
    owner="front",
)
# Priorities and TTFT objectives (tenancy/bands.py, front/gate.py): values of GateSettings too.
OBJECTIVE_PRIORITIES: Knob[str | None] = Knob(
    "objective_priorities",
    str,
    None,
    "Priority bands of the GIE InferenceObjectives a request names in x-gateway-inference-objective, as "
    "NAME=PRIORITY,... (higher goes first while engines are full; negative is sheddable: refused at once "
    "then). With API keys on, only a trusted front's objective header counts.",
    "--objective-priorities",
    crd="router.priorities.objectives",
    max_length=4096,
    pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*=-?[0-9]+(,[A-Za-z0-9][A-Za-z0-9._-]*=-?[0-9]+)*$",
    owner="front",
)
DEFAULT_TTFT_OBJECTIVE_MS: Knob[int | None] = Knob(
    "default_ttft_objective_ms",
    int,
    None,
    "The time to first token, in ms, a request aims for unless it sends x-slo-ttft-ms or its API key names "
    "one: the router then avoids a replica predicted to miss it (unset: no objective).",
    "--default-ttft-objective-ms",
    crd="router.priorities.defaultTtftObjectiveMs",
    minimum=1,
    maximum=3_600_000,
    owner="front",
)
# Request tracing (router/tracing.py): the router's RouterSettings.
OTLP_ENDPOINT: Knob[str | None] = Knob(
    "otlp_endpoint",
    str,
    None,
    "OpenTelemetry: the collector's OTLP/HTTP base URL (e.g. http://otel-collector.observability:4318); "
    "the router then sends a span per request to its /v1/traces (unset: tracing off).",
    "--otlp-endpoint",
    crd="router.tracing.otlpEndpoint",
    max_length=2048,
    pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
    owner="front",
)
TRACE_SAMPLE_RATIO: Knob[float] = Knob(
    "trace_sample_ratio",
    float,
    1.0,
    "OpenTelemetry: the share of requests traced among those arriving without a caller's sampling "
    "decision (a caller's traceparent decides for its own requests).",
    "--trace-sample-ratio",
    crd="router.tracing.sampleRatio",
    minimum=0,
    maximum=1,
    crd_default=False,
    owner="front",
)
NORMALISE: Knob[bool] = Knob(
    "normalise",
    bool,
    True,
    "Canonicalise prompts before hashing (collapse whitespace, Unicode NFC); off: hash them exactly as sent.",
    "--no-normalise",
)
INDEX_BLOCKS: Knob[int] = Knob(
    "index_blocks_per_member",
    int,
    # 16384 x 256 characters ~ 1M tokens, about what one 80 GB GPU holds for an 8B model after weights.
    16384,
    "prefix-cache only: blocks the router remembers per replica (least recently used go first).",
    "--index-blocks",
    minimum=1,
)
ADAPTER_SLOTS: Knob[int] = Knob(
    "adapter_slots",
    int,
    0,
    "prefix-cache only: LoRA adapters each engine holds at once (vLLM's --max-loras); the router then "
    "believes the last this many adapters sent to a replica are loaded there and counts the cost of loading "
    "one elsewhere (0: unknown, no such belief or cost).",
    "--adapter-slots",
    minimum=0,
    maximum=4096,
)
ADAPTER_LOAD_COST: Knob[int | None] = Knob(
    "adapter_load_cost",
    int,
    # None: 50 ms of prefill at the engine model's 20,000 tokens/s, i.e. 1,000 tokens, or
    # 4,000 characters when blocks are characters (the 4 characters a token of English text
    # that the default block size assumes): routing.adapter_residency.load_cost.
    None,
    "prefix-cache only: what loading an adapter into a replica that is not believed to hold it costs, in "
    "prompt units (characters, or tokens with a tokenizer); unset: 1,000 tokens (4,000 characters), about "
    "50 ms of prefill.",
    "--adapter-load-cost",
    minimum=0,
    maximum=100_000_000,
)

# In this order the CRD lists the fields and the operator renders the arguments.
KNOBS: tuple[Knob[Any], ...] = (
    STRATEGY,
    MODE,
    BLOCK_SIZE,
    PREFIX_BLOCKS,
    LOAD_FACTOR,
    LOAD_SLACK,
    QUEUE_PENALTY,
    VIRTUAL_NODES,
    TENANT_HEADER,
    ISOLATE_TENANTS,
    RETRIES,
    HOLD_SECONDS,
    MAX_HELD_REQUESTS,
    NORMALISE,
    INDEX_BLOCKS,
    ADAPTER_SLOTS,
    ADAPTER_LOAD_COST,
    SCRAPE_INTERVAL,
    MAX_IN_FLIGHT_PER_MEMBER,
    MAX_WAITING,
    MAX_WAIT_SECONDS,
    RESERVE_PER_TENANT,
    OBJECTIVE_PRIORITIES,
    DEFAULT_TTFT_OBJECTIVE_MS,
    OTLP_ENDPOINT,
    TRACE_SAMPLE_RATIO,
)
ROUTING_KNOBS: tuple[Knob[Any], ...] = tuple(k for k in KNOBS if k.owner == "routing")  # RoutingConfig's fields
FRONT_KNOBS: tuple[Knob[Any], ...] = tuple(k for k in KNOBS if k.owner == "front")
SPEC_KNOBS: tuple[Knob[Any], ...] = tuple(k for k in KNOBS if k.crd)  # what the CRD and the operator carry


def knob_named(name: str) -> Knob[Any]:
    for knob in KNOBS:
        if knob.name == name:
            return knob
    raise KeyError(name)
