"""`bench priorities`: do priority bands and TTFT objectives keep interactive work on time under
overload, while sheddable work absorbs it? In simulation, every target in the same run.

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
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from prefixroute.bench import mixed
from prefixroute.bench.errors import BenchError, exit_status
from prefixroute.bench.fleet_sim import CLIENT_GONE, Arrival, Routed, SimFleet
from prefixroute.bench.results import percentile
from prefixroute.bench.simulate import Prepared, prepare, replica_names
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.scheduler import Event
from prefixroute.routing.config import RoutingConfig
from prefixroute.tenancy.bands import DEFAULT_PRIORITY, SHED_TTL


@dataclass(frozen=True)
class Target:
    label: str
    strategy: str
    admission: bool  # fair sharing at --max-in-flight-per-member
    bands: bool  # each tenant's priority and objective (else priority 0, no objective)


TARGETS = (
    Target("prefix-cache+bands", "prefix-cache", True, True),
    Target("prefix-cache+fair", "prefix-cache", True, False),
    Target("prefix-cache", "prefix-cache", False, False),
    Target("least-load", "least-load", False, False),
    Target("round-robin", "round-robin", False, False),
)
BASELINE = "prefix-cache"  # today's default: the ratios' reference


@dataclass(frozen=True)
class Settings:
    replicas: int = 4
    per_member: int = 16  # --max-in-flight-per-member for the targets with admission
    max_wait_seconds: float = 30.0  # the bands' TTL (the router's --max-wait-seconds)
    patience: float = 30.0  # seconds a client waits for its first token


@dataclass
class ClassTally:
    """What one tenant class got in one run."""

    arrived: int = 0
    good: int = 0
    answered: int = 0  # got a first token
    ttfts: list[float] = field(default_factory=list, repr=False)  # of the answered
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> requests never answered

    @property
    def shed(self) -> int:
        """Refused by the router on arrival (sheddable with no room, or its band's queue full)."""
        return sum(n for reason, n in self.dropped.items() if reason not in (SHED_TTL, CLIENT_GONE))

    @property
    def timed_out(self) -> int:
        """Waited past its band's TTL, or its client gave up."""
        return self.dropped[SHED_TTL] + self.dropped[CLIENT_GONE]


@dataclass
class Tally:
    """One target at one load: per class, and the engines' prompt and cached tokens."""

    classes: dict[str, ClassTally]
    prompt_tokens: int = 0
    cached_tokens: int = 0

    @property
    def arrived(self) -> int:
        return sum(c.arrived for c in self.classes.values())

    @property
    def good(self) -> int:
        return sum(c.good for c in self.classes.values())

    @property
    def ttfts(self) -> list[float]:
        return [t for c in self.classes.values() for t in c.ttfts]

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


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


def _p(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 4) if values else None


def _late_p99(c: ClassTally) -> float | None:
    """p99 TTFT with every request never answered counted as infinitely late."""
    if not c.arrived:
        return None
    values = c.ttfts + [math.inf] * (c.arrived - c.answered)
    values.sort()
    at = values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]
    return None if math.isinf(at) else round(at, 4)


def _ratio(mine: float, theirs: float) -> float | None:
    return round(mine / theirs, 3) if theirs > 0 else None


def row(load: float, label: str, tally: Tally, baseline: Tally | None) -> dict[str, Any]:
    """One line of the table (and of the JSON), with ratios to `baseline` of the same load."""
    inter = tally.classes[mixed.INTERACTIVE.name]
    ttfts = tally.ttfts
    out: dict[str, Any] = {
        "load": load,
        "target": label,
        "arrived": tally.arrived,
        "goodput": round(tally.good / tally.arrived, 4) if tally.arrived else None,
        "interactive_goodput": round(inter.good / inter.arrived, 4) if inter.arrived else None,
        "interactive_p99": _late_p99(inter),
        "shed": {name: c.shed for name, c in tally.classes.items()},
        "timed_out": {name: c.timed_out for name, c in tally.classes.items()},
        "hit_rate": round(tally.hit_rate, 4),
        "ttft_p50": _p(ttfts, 50),
        "ttft_p99": _p(ttfts, 99),
    }
    if baseline is not None:
        out["goodput_x"] = _ratio(tally.good, baseline.good)
        out["hit_rate_x"] = _ratio(tally.hit_rate, baseline.hit_rate)
        out["ttft_p50_x"] = _ratio(percentile(ttfts, 50), percentile(baseline.ttfts, 50))
        out["ttft_p99_x"] = _ratio(percentile(ttfts, 99), percentile(baseline.ttfts, 99))
    return out


COLUMNS = (
    ("load", "load"),
    ("target", "target"),
    ("goodput", "goodput"),
    ("goodput_x", "x"),
    ("interactive_goodput", "inter good"),
    ("interactive_p99", "inter p99"),
    ("shed", "shed i/s/b"),
    ("timed_out", "timed out i/s/b"),
    ("hit_rate", "hit"),
    ("hit_rate_x", "x"),
    ("ttft_p50", "p50"),
    ("ttft_p50_x", "x"),
    ("ttft_p99", "p99"),
    ("ttft_p99_x", "x"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return "/".join(str(v) for v in value.values())
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], stream: TextIO, baseline: str) -> None:
    header = tuple(title for _, title in COLUMNS)
    table = [header] + [
        tuple(_cell(r.get(key)) if key != "load" else f"{r['load']:g}x" for key, _ in COLUMNS) for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for n, line in enumerate(table):
        cells = (c.ljust(w) if i in (0, 1) else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
        stream.write("  ".join(cells).rstrip() + "\n")
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    stream.write(
        f"(load: x the derived capacity; x columns: over {baseline} at the same load; p99 of interactive counts "
        "unanswered as late, '-' = over 1% unanswered; TTFT in engine seconds; i/s/b: interactive/standard/batch)\n"
    )


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
    load: float, targets: Sequence[Target], settings: Settings, engine: EngineConfig, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every target at one load, over one prepared workload; rows with ratios to the baseline."""
    routing = RoutingConfig()
    rate = load * mixed.capacity(engine, settings.replicas)
    requests = mixed.workload(rate, args.seconds, args.seed)
    prepared = prepare(requests, routing, engine)
    tenants = [r.tenant or "" for r in requests]
    tallies = {t.label: simulate_target(prepared, tenants, t, settings, routing, engine) for t in targets}
    return [row(load, label, tally, tallies[args.baseline]) for label, tally in tallies.items()]


def _main(args: argparse.Namespace) -> int:
    from prefixroute.engine_sim.cli import engine_config

    if args.seconds <= 0 or args.replicas < 1 or args.max_wait_seconds <= 0 or args.patience <= 0:
        raise BenchError("--seconds, --replicas, --max-wait-seconds and --patience must be positive")
    targets = _targets(args.targets, args.baseline)
    loads = _loads(args.loads)
    engine = engine_config(args, "engine-sim")
    per_member = args.max_in_flight_per_member or args.max_running
    settings = Settings(args.replicas, per_member, args.max_wait_seconds, args.patience)
    capacity = mixed.capacity(engine, args.replicas)
    print(f"derived capacity: {capacity:.1f} requests/s on {args.replicas} engines", file=sys.stderr)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for load in loads:
        rows += run_load(load, targets, settings, engine, args)
        print(f"{load:g}x: done ({time.monotonic() - started:.0f}s)", file=sys.stderr)
    print_table(rows, sys.stdout, args.baseline)
    if args.json_out:
        meta = {"capacity_rps": round(capacity, 3), "settings": settings.__dict__, "seconds": args.seconds}
        meta |= {"seed": args.seed, "max_running": args.max_running, "classes": [c.__dict__ for c in mixed.CLASSES]}
        with open(args.json_out, "w") as f:
            json.dump({"run": meta, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0
