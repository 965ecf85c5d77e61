"""`bench simulate`: N engines in virtual time, routed by the real routing core.

Each request body is read twice, by the same code as in production: the
routing core's `request_from_body` gives the router's view (block hashes of
the canonical prefix), engine-sim's `prompt.parse` and `block_hashes` give the
engine's (token blocks, salted). Both are computed once per request and shared
by every strategy, which is what makes 4 strategies x 4,000 long requests fast.

Then, per strategy, the shared discrete-event fleet (`fleet_sim.SimFleet`): arrivals
in order, each routed through the routing core's one dispatch exactly as the router
routes it (the engine's first token is the ticket's first byte, its last token the
ticket's finish; optionally the engines' queue gauges every `scrape_interval`, as the
router's scraper does), and each replica an engine-model `Scheduler` over its own
`KVCache`. TTFT is arrival to first token in virtual seconds.

Two modes, as the router has them: `approximate` (the router's canonical text in
`--block-size` character blocks, learned from its own routing) and `precise` (the
engine's own tokens in the engine's blocks, model and cache_salt in the first,
learned from the engines' KV events delivered `event_delay` seconds late to every
router replica). With `routers=N` the arrivals go round-robin over N routers, which
share nothing (`peers` None), or tell each other their load, and with `history` what
they routed where, a report at most every `interval` seconds reaching the others
`delay` seconds later (`fleet_sim.PeerSharing`, over `routing.peers`).

The engines tokenize with `EngineConfig.tokenizer` (engine-sim's bytes, or a model folder's
BPE and template), and precise keys are cut from those tokens, as a router given the same
folder cuts them. The router's own time does not pass in virtual time, so it is measured:
`prepare` times each request's keying (approximate: canonical text and hashes; precise: the
engine's reading of the body — the model's template and tokenizer, the router's very work —
and the token-block keys), the fleet times each routing step, and `simulate(router_time=MEASURED)`
adds both to that request's TTFT (`RunResult.router_times`).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from prefixroute.bench.fleet_sim import (
    AdapterSetup,
    Arrival,
    EventDelivery,
    PeerSharing,
    Routed,
    SimFleet,
    StrategyMaker,
)
from prefixroute.bench.results import RunResult
from prefixroute.bench.workload import BenchRequest
from prefixroute.engine_model import prompt
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest
from prefixroute.engine_model.kv_cache import block_hashes
from prefixroute.engine_model.scheduler import Event
from prefixroute.routing.adapter_residency import load_cost
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidRequest
from prefixroute.routing.request import RoutingRequest, request_from_body, request_from_tokens

MODES = ("approximate", "precise")
# What router replicas share: nothing, their load in flight, or their load and history.
SHARING = ("off", "load", "all")


def peer_sharing(sharing: str, delay: float, interval: float) -> PeerSharing | None:
    """`SHARING`'s names as the fleet's peer setting."""
    if sharing not in SHARING:
        raise ValueError(f"unknown sharing {sharing!r}; choose from {', '.join(SHARING)}")
    if sharing == "off":
        return None
    return PeerSharing(delay, interval, history=sharing == "all")


@dataclass(frozen=True, slots=True)
class Prepared:
    """One request as router and engine see it; `error` when either rejects it."""

    at: float
    routing: RoutingRequest | None
    blocks: Sequence[int]
    prompt_tokens: int
    output_tokens: int
    error: str | None = None
    precise: RoutingRequest | None = None  # the engine's tokens, keyed as its KV events are (precise mode)
    tokens: Sequence[int] | None = None  # those tokens (what the engine's events carry)
    salt: str | None = None
    key_s: float = 0.0  # wall seconds the router's approximate keys took (canonical text, hashes)
    adapter: str | None = None  # the LoRA adapter it asks for (None: the base model)
    precise_key_s: float = 0.0  # ... its precise keys: the model's template and tokenizer, token blocks


@dataclass(frozen=True, slots=True)
class RouterTime:
    """What each request's TTFT is charged for the router's own work: virtual time stands still
    while the real routing core runs, so without a charge a simulated TTFT leaves it out."""

    fixed_s: float | None = 0.0  # seconds for every request; None: what its keying and routing step took
    scale: float = 1.0  # engine seconds per wall second (a live run's --time-scale, to compare with it)

    @property
    def charges(self) -> bool:
        return self.fixed_s != 0.0

    def of(self, routed: Routed) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        return (routed.arrival.key_s + routed.route_s) * self.scale


NO_CHARGE = RouterTime()
MEASURED = RouterTime(None)


def precise_config(routing: RoutingConfig, engine: EngineConfig) -> RoutingConfig:
    """Precise mode keys blocks as the engine cuts them, and prices an adapter's load in tokens."""
    return replace(routing, block_size=engine.block_tokens, adapter_load_cost=load_cost(routing, tokens=True))


def prepare(
    requests: Sequence[BenchRequest],
    routing: RoutingConfig,
    engine: EngineConfig,
    progress: Callable[[int], None] | None = None,
    precise: bool = False,
) -> list[Prepared]:
    """Both views of every request; with `precise`, also the engine-token keys and the tokens
    (4 bytes a token: half the Mooncake trace is about 120 MB). Each keying is timed."""
    out: list[Prepared] = []
    token_config = precise_config(routing, engine)
    for i, req in enumerate(requests):
        try:
            out.append(_prepare_one(req, routing, engine, token_config if precise else None))
        except (BadRequest, InvalidRequest) as exc:
            out.append(Prepared(req.at, None, (), 0, 0, error=exc.message))
        if progress is not None:
            progress(i + 1)
    return out


def _prepare_one(
    req: BenchRequest, routing: RoutingConfig, engine: EngineConfig, token_config: RoutingConfig | None
) -> Prepared:
    """One request's views (precise ones with `token_config`), and what keying each cost the router."""
    body = req.body(engine.model, stream=False)
    started = time.perf_counter()
    # The engine's reading of the body is the model's template and tokenizer on it: exactly the
    # work a precise router does before keying (the same code: engine_model.tokenization).
    # An adapter's name is a model the engine serves (registered on it; the fleet decides where),
    # and the engine runs the request with it, as engine-sim does.
    parsed = prompt.parse(req.kind, body, engine, adapters=(req.adapter,) if req.adapter else ())
    tokenized = time.perf_counter()
    if len(parsed.prompts) != 1:
        raise BadRequest("the simulation takes one prompt per request")
    tokens = parsed.prompts[0]
    routed = request_from_body(req.kind, body, routing, tenant=req.tenant, adapter=req.adapter)
    key_s = time.perf_counter() - tokenized
    # 8 bytes a block, not a Python int each: a fleet-sized run holds millions of them. The
    # engine's keys are engine-sim's own (the same call on the same parse): they include the
    # adapter, as vLLM's block hashes include the LoRA, so a prefix cached for one adapter is
    # no hit for the base model or another adapter.
    blocks = array("Q", block_hashes(tokens, engine.block_tokens, parsed.cache_salt, parsed.adapter))
    if token_config is None:
        return Prepared(req.at, routed, blocks, len(tokens), parsed.max_tokens, key_s=key_s, adapter=req.adapter)
    keyed = time.perf_counter()
    keys = request_from_tokens(tokens, token_config, engine.model, req.adapter, parsed.cache_salt, req.tenant)
    precise_key_s = (tokenized - started) + (time.perf_counter() - keyed)
    return Prepared(
        req.at,
        routed,
        blocks,
        len(tokens),
        parsed.max_tokens,
        precise=keys,
        tokens=array("I", tokens),
        salt=parsed.cache_salt,
        key_s=key_s,
        adapter=req.adapter,
        precise_key_s=precise_key_s,
    )


def replica_names(replicas: int) -> list[str]:
    return [f"engine-{i}" for i in range(replicas)]


def _arrival(name: str, item: Prepared, keys: RoutingRequest, key_s: float) -> Arrival:
    """A prepared request as the fleet takes it, with the wall time its keys took."""
    return Arrival(
        name,
        item.at,
        keys,
        item.blocks,
        item.prompt_tokens,
        item.output_tokens,
        item.tokens,
        item.salt,
        key_s=key_s,
        adapter=item.adapter,
    )


def simulate(
    prepared: Sequence[Prepared],
    strategy: str,
    replicas: int,
    routing: RoutingConfig,
    engine: EngineConfig,
    scrape_interval: float = 0.0,
    routers: int = 1,
    mode: str = "approximate",
    event_delay: float = 0.0,
    label: str | None = None,
    make_strategy: StrategyMaker | None = None,
    peers: PeerSharing | None = None,
    router_time: RouterTime = NO_CHARGE,
    adapters: AdapterSetup | None = None,
) -> RunResult:
    """Run one strategy over the prepared requests; returns what a live replay would measure.

    `make_strategy` (with a `label` for the results) replaces the product's strategy of that
    name with a bench-only one, such as a reference router. `router_time`: what each TTFT is
    charged for the router's own work (nothing by default, which keeps results exact).
    `adapters`: the engines serve LoRA adapters (their loads are counted in the result)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    precise = mode == "precise"
    base = precise_config(routing, engine) if precise else routing
    config = replace(base, strategy=strategy)
    names = replica_names(replicas)
    result = RunResult(strategy=label or strategy, mode="simulate", per_replica={n: 0 for n in names})
    first_arrival = prepared[0].at if prepared else 0.0
    last_done = first_arrival

    def first_token(routed: Routed, event: Event) -> None:
        charged = router_time.of(routed)
        result.ttfts.append(event.time - routed.arrival.at + charged)
        if router_time.charges:
            result.router_times.append(charged)

    def finished(routed: Routed, event: Event) -> None:
        nonlocal last_done
        seq = routed.sequence
        result.requests += 1
        result.prompt_tokens += seq.prompt_tokens
        result.cached_tokens += seq.cached_tokens
        result.output_tokens += seq.output_tokens
        result.per_replica[routed.ticket.member.name] += 1
        last_done = max(last_done, event.time)

    events = EventDelivery(engine.model, event_delay) if precise else None
    fleet = SimFleet(
        config,
        engine,
        routers,
        on_first_token=first_token,
        on_finished=finished,
        events=events,
        make_strategy=make_strategy,
        peers=peers,
        adapters=adapters,
    )
    fleet.add(*names)
    next_scrape = 0.0
    for i, item in enumerate(prepared):
        fleet.advance_to(item.at)
        keys = item.precise if precise else item.routing
        if item.error is not None or keys is None:
            if precise and item.error is None:
                raise ValueError("precise mode needs requests prepared with precise=True")
            result.errors += 1
            continue
        if scrape_interval > 0 and item.at >= next_scrape:
            fleet.report_engines()
            next_scrape = item.at + scrape_interval
        fleet.submit(_arrival(f"r{i}", item, keys, item.precise_key_s if precise else item.key_s))
    fleet.advance_to(float("inf"))
    result.duration_s = last_done - first_arrival
    result.adapter_loads = fleet.adapter_loads()
    return result
