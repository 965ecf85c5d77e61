"""`bench priorities`: do priority bands and TTFT objectives keep interactive work on time under
overload, while sheddable work absorbs it? Every target in the same run, simulated or live.

The workload is `bench.mixed` (interactive with a 500 ms objective, standard, sheddable batch)
at multiples of the fleet's derived capacity (`--loads`, default 0.8, 1.2 and 2). Each load
is prepared once and played against every target over the same simulated engines
(`fleet_sim.SimFleet`, the routing core's one dispatch and the gate's banded admission):

- `prefix-cache+bands`: the product with priorities on — fair sharing at
  `--max-in-flight-per-member`, each tenant's priority and TTFT objective from its key;
- `prefix-cache+fair`: the same fair sharing with bands off (every key at priority 0, no
  objectives): what bands add over fair sharing;
- `prefix-cache`, `least-load`, `round-robin`: today's defaults, no admission, no priorities.

Every client gives up after `--patience` seconds without a first token (the router aborts its
request in the engine, as a real router does when its client leaves). A request is **good**
when it got its first token within its tenant's objective — or, for a tenant without one, at
all. The tenant's objective judges every target alike: a target that ignores it is still
measured against it. Reported per load and target: goodput (good / arrived) and its ratio to
`--baseline`'s in the same run, the interactive tenant's goodput and p99 TTFT (a request
never answered counts as infinitely late), requests shed (refused by the router) and timed
out (its band's TTL, or its client's patience) per band, the prefix-cache hit rate, and TTFT
p50/p99 over the answered requests.

`--live` plays the same workload through engine-sim and router processes on loopback
(`bench.priorities_live`) and prints the same table; `--plot` draws goodput and the
interactive p99 by load (`bench.priorities_plot`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from prefixroute.bench import mixed
from prefixroute.bench.errors import BenchError, exit_status
from prefixroute.bench.fleet_sim import Arrival, Routed, SimFleet
from prefixroute.bench.priorities_live import LiveFleet, live_fleet, play
from prefixroute.bench.priorities_plot import plot_rows
from prefixroute.bench.priority_runs import BASELINE, TARGETS, ClassTally, Settings, Tally, Target, print_table, row
from prefixroute.bench.simulate import Prepared, prepare, replica_names
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.scheduler import Event
from prefixroute.routing.config import RoutingConfig
from prefixroute.tenancy.bands import DEFAULT_PRIORITY


def _arrival(i: int, item: Prepared, c: mixed.TenantClass, bands: bool) -> Arrival:
    assert item.routing is not None
    priority, objective = (c.priority, c.objective) if bands else (DEFAULT_PRIORITY, None)
    return Arrival(
        f"r{i}",
        item.at,
        item.routing,
        item.blocks,
        item.prompt_tokens,
        item.output_tokens,
        objective=objective,
        priority=priority,
    )


def simulate_target(
    prepared: Sequence[Prepared],
    tenants: Sequence[str],
    target: Target,
    settings: Settings,
    routing: RoutingConfig,
    engine: EngineConfig,
    classes: Sequence[mixed.TenantClass] = mixed.CLASSES,
) -> Tally:
    """Play the prepared requests (tenant `tenants[i]` for request i) against one target."""
    known = mixed.by_name(classes)
    tally = Tally({c.name: ClassTally() for c in classes})

    def first_token(routed: Routed, event: Event) -> None:
        c = known[tenants[int(routed.arrival.id[1:])]]
        ttft = event.time - routed.arrival.at
        mine = tally.classes[c.name]
        mine.answered += 1
        mine.ttfts.append(ttft)
        mine.good += c.objective is None or ttft <= c.objective

    def finished(routed: Routed, _event: Event) -> None:
        tally.prompt_tokens += routed.sequence.prompt_tokens
        tally.cached_tokens += routed.sequence.cached_tokens

    def dropped(arrival: Arrival, reason: str, _at: float) -> None:
        tally.classes[tenants[int(arrival.id[1:])]].dropped[reason] += 1

    fleet = SimFleet(
        RoutingConfig(**{**routing.__dict__, "strategy": target.strategy}),
        engine,
        on_first_token=first_token,
        on_finished=finished,
        max_in_flight_per_member=settings.per_member if target.admission else 0,
        max_wait_seconds=settings.max_wait_seconds,
        patience=settings.patience,
        on_dropped=dropped,
    )
    fleet.add(*replica_names(settings.replicas))
    for i, item in enumerate(prepared):
        if item.routing is None:
            raise BenchError(f"request {i} was not accepted: {item.error}")
        c = known[tenants[i]]
        tally.classes[c.name].arrived += 1
        fleet.advance_to(item.at)
        fleet.submit(_arrival(i, item, c, target.bands))
    fleet.advance_to(float("inf"))
    return tally


def register(sub: Any) -> None:
    from prefixroute.engine_sim.cli import add_engine_arguments

    p = sub.add_parser(
        "priorities", help="interactive, standard and sheddable batch tenants under overload: bands on and off"
    )
    p.add_argument("--loads", default="0.8,1.2,2", help="offered loads, as multiples of the derived capacity")
    p.add_argument("--seconds", type=float, default=120.0, help="length of the workload (engine seconds)")
    p.add_argument("--replicas", type=int, default=Settings.replicas)
    p.add_argument(
        "--max-in-flight-per-member",
        type=int,
        default=None,
        help="fair sharing's requests per engine for the targets with admission (default: --max-running)",
    )
    p.add_argument("--max-wait-seconds", type=float, default=Settings.max_wait_seconds, help="the bands' TTL")
    p.add_argument("--patience", type=float, default=Settings.patience, help="seconds a client waits for a first token")
    p.add_argument("--targets", default=",".join(t.label for t in TARGETS), help="which targets to run")
    p.add_argument("--baseline", default=BASELINE, help="the target the ratios are against")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_out", metavar="OUT")
    p.add_argument("--plot", metavar="OUT.png", help="goodput and the interactive p99 TTFT by load, per target")
    p.add_argument(
        "--live", action="store_true", help="engine-sim and router processes on loopback (default: simulate)"
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="live: engines run this much faster than engine time")
    p.add_argument(
        "--base-port", type=int, default=28800, help="live: the engines' first port (the router: after them)"
    )
    p.add_argument("--model", default="engine-sim", help="live: the engines' served model name")
    p.add_argument("--run-dir", default=None, help="live: where process logs and key files go (default: a temp dir)")
    add_engine_arguments(p)
    p.set_defaults(handler=main, max_running=16)  # engines of 16 running slots: the fleet fills at a modest rate


def main(args: argparse.Namespace) -> int:
    return exit_status(_main, args)


def _targets(names: str, baseline: str) -> list[Target]:
    known = {t.label: t for t in TARGETS}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise BenchError(f"--targets takes {', '.join(known)}")
    if baseline not in wanted:
        raise BenchError(f"--baseline {baseline!r} is not among --targets")
    return [known[n] for n in wanted]


def _loads(text: str) -> list[float]:
    try:
        loads = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError("--loads must be a comma-separated list of positive numbers") from None
    if not loads or min(loads) <= 0:
        raise BenchError("--loads must be a comma-separated list of positive numbers")
    return loads


def run_load(
    load: float,
    targets: Sequence[Target],
    settings: Settings,
    engine: EngineConfig,
    args: argparse.Namespace,
    fleet: LiveFleet | None = None,
) -> list[dict[str, Any]]:
    """Every target at one load, over one workload — simulated, or through `fleet` live; rows
    with ratios to the baseline."""
    routing = RoutingConfig()
    rate = load * mixed.capacity(engine, settings.replicas)
    requests = mixed.workload(rate, args.seconds, args.seed)
    if fleet is not None:
        tallies = {t.label: play(fleet, requests, t, settings) for t in targets}
    else:
        prepared = prepare(requests, routing, engine)
        tenants = [r.tenant or "" for r in requests]
        tallies = {t.label: simulate_target(prepared, tenants, t, settings, routing, engine) for t in targets}
    return [row(load, label, tally, tallies[args.baseline]) for label, tally in tallies.items()]


def _fleet(args: argparse.Namespace) -> AbstractContextManager[LiveFleet | None]:
    """Live: the engine-sims, started (their logs under --run-dir or a temp dir); else nothing."""
    if not args.live:
        return nullcontext()
    log_dir = Path(args.run_dir) if args.run_dir else Path(tempfile.mkdtemp(prefix="prefixroute-priorities-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"live: engines on {args.base_port}.., logs in {log_dir}", file=sys.stderr)
    return live_fleet(args, log_dir)


def _main(args: argparse.Namespace) -> int:
    from prefixroute.engine_sim.cli import engine_config

    if args.seconds <= 0 or args.replicas < 1 or args.max_wait_seconds <= 0 or args.patience <= 0:
        raise BenchError("--seconds, --replicas, --max-wait-seconds and --patience must be positive")
    if args.live and (args.time_scale <= 0 or not 1024 <= args.base_port <= 65535 - args.replicas):
        raise BenchError("--time-scale must be positive and --base-port a free port above 1023")
    targets = _targets(args.targets, args.baseline)
    loads = _loads(args.loads)
    engine = engine_config(args, "engine-sim")
    per_member = args.max_in_flight_per_member or args.max_running
    settings = Settings(args.replicas, per_member, args.max_wait_seconds, args.patience)
    capacity = mixed.capacity(engine, args.replicas)
    print(f"derived capacity: {capacity:.1f} requests/s on {args.replicas} engines", file=sys.stderr)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with _fleet(args) as fleet:
        for load in loads:
            rows += run_load(load, targets, settings, engine, args, fleet)
            print(f"{load:g}x: done ({time.monotonic() - started:.0f}s)", file=sys.stderr)
    print_table(rows, sys.stdout, args.baseline)
    mode = f"live, time scale {args.time_scale:g}" if args.live else "simulated"
    if args.plot:
        title = f"bench priorities ({mode}): {args.replicas} engines, {args.seconds:g} engine-seconds a load"
        plot_rows(rows, args.plot, title, settings.patience)
    if args.json_out:
        meta = {"capacity_rps": round(capacity, 3), "settings": settings.__dict__, "seconds": args.seconds}
        meta |= {"seed": args.seed, "max_running": args.max_running, "classes": [c.__dict__ for c in mixed.CLASSES]}
        meta |= {"live": args.live, "time_scale": args.time_scale if args.live else None}
        with open(args.json_out, "w") as f:
            json.dump({"run": meta, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0
