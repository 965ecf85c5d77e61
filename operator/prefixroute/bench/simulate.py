"""`bench simulate`: N engines in virtual time, routed by the real routing core.

Each request body is read twice, by the same code as in production: the
routing core's `request_from_body` gives the router's view (block hashes of
the canonical prefix), engine-sim's `prompt.parse` and `block_hashes` give the
engine's (token blocks, salted). Both are computed once per request and shared
by every strategy, which is what makes 4 strategies x 4,000 long requests fast.

Then, per strategy, a discrete-event loop: arrivals in order, each routed by
`make_strategy(config).select(request, fleet, load)` with the router's own
`LoadTracker` accounting (begin at routing with the prefill the strategy expects,
first byte at the first token, end at completion, as the router does; optionally the
engines' queue gauges every `scrape_interval`, as the router's scraper does),
and each replica an engine-sim `Scheduler` over its own `KVCache`. TTFT is
arrival to first token in virtual seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from prefixroute.bench.results import RunResult
from prefixroute.bench.workload import BenchRequest
from prefixroute.engine_model import prompt
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest
from prefixroute.engine_model.kv_cache import KVCache, block_hashes
from prefixroute.engine_model.scheduler import EventKind, Scheduler
from prefixroute.engine_model.scheduler import Sequence as EngineSequence
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidRequest
from prefixroute.routing.factory import make_strategy
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest, request_from_body


@dataclass(frozen=True, slots=True)
class Prepared:
    """One request as router and engine see it; `error` when either rejects it."""

    at: float
    routing: RoutingRequest | None
    blocks: Sequence[int]
    prompt_tokens: int
    output_tokens: int
    error: str | None = None


def prepare(
    requests: Sequence[BenchRequest],
    routing: RoutingConfig,
    engine: EngineConfig,
    progress: Callable[[int], None] | None = None,
) -> list[Prepared]:
    out: list[Prepared] = []
    for i, req in enumerate(requests):
        body = req.body(engine.model, stream=False)
        try:
            parsed = prompt.parse(req.kind, body, engine)
            if len(parsed.prompts) != 1:
                raise BadRequest("the simulation takes one prompt per request")
            tokens = parsed.prompts[0]
            routed = request_from_body(req.kind, body, routing, tenant=req.tenant)
            blocks = block_hashes(tokens, engine.block_tokens, parsed.cache_salt)
            out.append(Prepared(req.at, routed, blocks, len(tokens), parsed.max_tokens))
        except (BadRequest, InvalidRequest) as exc:
            out.append(Prepared(req.at, None, (), 0, 0, error=exc.message))
        if progress is not None:
            progress(i + 1)
    return out


def replica_names(replicas: int) -> list[str]:
    return [f"engine-{i}" for i in range(replicas)]


def simulate(
    prepared: Sequence[Prepared],
    strategy: str,
    replicas: int,
    routing: RoutingConfig,
    engine: EngineConfig,
    scrape_interval: float = 0.0,
) -> RunResult:
    """Run one strategy over the prepared requests; returns what a live replay would measure."""
    config = RoutingConfig(**{**routing.__dict__, "strategy": strategy})
    names = replica_names(replicas)
    fleet = Fleet(tuple(Member(n, f"sim://{n}") for n in names), config.virtual_nodes)
    chooser = make_strategy(config)
    load = LoadTracker()
    engines = {
        n: Scheduler(KVCache(engine.kv_blocks, engine.block_tokens), engine.latency, engine.max_running) for n in names
    }
    result = RunResult(strategy=strategy, mode="simulate", per_replica={n: 0 for n in names})
    # (time, order, replica): the next pending event of each engine, refreshed after every change
    wakeups: list[tuple[float, int, str]] = []
    prefills: dict[str, int] = {}  # request id -> prefill units counted as pending in `load`
    order = 0
    next_scrape = 0.0
    first_arrival = prepared[0].at if prepared else 0.0
    last_done = first_arrival

    def schedule(name: str) -> None:
        nonlocal order
        due = engines[name].next_event_time()
        if due is not None:
            order += 1
            heapq.heappush(wakeups, (due, order, name))

    def handle(name: str, now: float) -> None:
        nonlocal last_done
        for event in engines[name].advance(now):
            seq = event.sequence
            req, member = cast(tuple[RoutingRequest, Member], seq.payload)
            if event.kind is EventKind.FIRST_TOKEN:
                result.ttfts.append(event.time - seq.arrival)
                load.first_byte(member.name, prefills.pop(seq.id))
            elif event.kind is EventKind.FINISHED:
                load.end(member.name, req.units, prefill=prefills.pop(seq.id, 0))
                chooser.on_complete(req, member, True)
                result.requests += 1
                result.prompt_tokens += seq.prompt_tokens
                result.cached_tokens += seq.cached_tokens
                result.output_tokens += seq.output_tokens
                last_done = max(last_done, event.time)
        schedule(name)

    def drain_until(limit: float) -> None:
        while wakeups and wakeups[0][0] <= limit:
            due, _, name = heapq.heappop(wakeups)
            if engines[name].next_event_time() != due:
                continue  # stale: the engine changed since this wake-up was planned
            handle(name, due)

    for i, item in enumerate(prepared):
        drain_until(item.at)
        if item.error is not None or item.routing is None:
            result.errors += 1
            continue
        if scrape_interval > 0 and item.at >= next_scrape:
            for n in names:
                s = engines[n]
                load.report_engine(n, s.num_waiting, s.num_running, s.kv_usage())
            next_scrape = item.at + scrape_interval
        member = chooser.select(item.routing, fleet, load)
        matched = chooser.matched_blocks(item.routing, member) or 0
        prefill = max(0, item.routing.units - matched * config.block_size)
        prefills[f"r{i}"] = prefill
        load.begin(member.name, item.routing.units, prefill)
        chooser.on_routed(item.routing, member)
        result.per_replica[member.name] += 1
        seq = EngineSequence(
            f"r{i}", item.blocks, item.prompt_tokens, item.output_tokens, item.at, payload=(item.routing, member)
        )
        engines[member.name].submit(seq, item.at)
        handle(member.name, item.at)
    drain_until(float("inf"))
    result.duration_s = last_done - first_arrival
    return result
