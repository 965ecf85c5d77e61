"""`bench adapters`: routing many LoRA adapters over a fleet with few slots, simulated.

The workload is a Mooncake trace whose conversations each ask for one adapter, with Zipf
popularity (`bench.adapter_workload`: 50 adapters, exponent 1.0, 10% on the base model
by default). The engines (`fleet_sim.SimFleet` over engine_model schedulers) hold 4
adapters each in slots and take 50 ms to load one (`engine_model.adapters`); their block
keys include the adapter, so a prefix cached for one adapter is a miss for another. Each
target routes the same prepared requests over fresh engines, through the routing core's
one dispatch, with the router's measured keying and decision time charged to each TTFT
(`simulate.MEASURED`):

- `round-robin`: the baseline;
- `prefix-cache`: today's prefix-cache, blind to adapters (no residency belief, no load
  cost; the adapter only salts its keys);
- `prefix-cache+adapters`: `--adapter-slots` set to the engines' slots: the last adapters
  sent to a member are believed loaded, loading one elsewhere costs `--adapter-load-cost`.

With `--placed N` each adapter is registered on N replicas only (`adapter_workload.placement`)
and every target runs again over that placement (labels end in "/placed"): the routers'
fleet lists what each member has, so a request goes only where its adapter is registered.

Reported per target: the prefix cache's hit rate, TTFT p50 and p99 (engine seconds, the
router's time included), adapter loads per minute of the run, and the ratios of each to the
baseline's in the same run.

With `--live` the same workload and targets (and placement) run through engine-sim and
router processes on loopback (`bench.adapters_live`), and the same table is printed from
what the engines and the clients measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from prefixroute.bench.adapter_workload import AdapterMix, load_adapter_trace, placement
from prefixroute.bench.errors import BenchError, exit_status
from prefixroute.bench.fleet_sim import AdapterSetup
from prefixroute.bench.results import RunResult, percentile
from prefixroute.bench.simulate import MEASURED, Prepared, prepare, replica_names, simulate
from prefixroute.bench.workload import BenchRequest, compress, head
from prefixroute.engine_model.adapters import DEFAULT_LOAD_SECONDS
from prefixroute.engine_model.config import EngineConfig
from prefixroute.routing.config import RoutingConfig

BASELINE = "round-robin"
PLACED = "/placed"


@dataclass(frozen=True)
class Target:
    label: str
    strategy: str
    aware: bool  # the router knows the engines' slots (--adapter-slots): residency belief and load cost


TARGETS = (
    Target(BASELINE, "round-robin", False),
    Target("prefix-cache", "prefix-cache", False),
    Target("prefix-cache+adapters", "prefix-cache", True),
)


def run_target(
    prepared: Sequence[Prepared],
    target: Target,
    replicas: int,
    routing: RoutingConfig,
    engine: EngineConfig,
    setup: AdapterSetup,
    label: str | None = None,
) -> RunResult:
    """One target over fresh engines serving `setup`'s adapters."""
    config = replace(routing, adapter_slots=setup.slots if target.aware else 0)
    return simulate(
        prepared,
        target.strategy,
        replicas,
        config,
        engine,
        label=label or target.label,
        router_time=MEASURED,
        adapters=setup,
    )


def row(result: RunResult, baseline: RunResult) -> dict[str, Any]:
    """What the table and the JSON show of one run, with its ratios to the baseline's."""
    figures, base = _figures(result), _figures(baseline)
    out: dict[str, Any] = {
        "target": result.strategy,
        "requests": result.requests,
        "errors": result.errors,
        "adapter_loads": result.adapter_loads,
        # simulated only: live, the router's time is inside the client's TTFT, not apart from it
        "router_ms_p50": round(1e3 * percentile(result.router_times, 50), 3) if result.router_times else None,
    }
    if result.host_load is not None:  # live: the machine's load around the run, beside its figures
        out["host_load_1m"] = list(result.host_load)
    for key, value in figures.items():
        out[key] = round(value, 4)
        out[f"{key}_vs_baseline"] = round(value / base[key], 3) if base[key] else None
    return out


def _figures(result: RunResult) -> dict[str, float]:
    minutes = result.duration_s / 60 if result.duration_s > 0 else float("nan")
    return {
        "hit_rate": result.hit_rate,
        "ttft_p50": percentile(result.ttfts, 50),
        "ttft_p99": percentile(result.ttfts, 99),
        "adapter_loads_per_min": result.adapter_loads / minutes,
    }


def print_table(rows: Sequence[dict[str, Any]], stream: TextIO) -> None:
    header = ("target", "reqs", "hit rate", "hit x", "TTFT p50", "p50 x", "p99", "p99 x", "loads/min", "loads x")
    lines = [header]
    for r in rows:
        lines.append(
            (
                r["target"],
                str(r["requests"]),
                f"{r['hit_rate']:.1%}",
                _ratio(r["hit_rate_vs_baseline"]),
                f"{r['ttft_p50']:.3f}",
                _ratio(r["ttft_p50_vs_baseline"]),
                f"{r['ttft_p99']:.3f}",
                _ratio(r["ttft_p99_vs_baseline"]),
                f"{r['adapter_loads_per_min']:.1f}",
                _ratio(r["adapter_loads_per_min_vs_baseline"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for n, line in enumerate(lines):
        stream.write("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
        stream.write("\n")
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    stream.write(
        f"(x = ratio to {BASELINE} over the same engines in this run; TTFT in engine seconds, the router's "
        "measured keying and decision included)\n"
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def register(sub: Any) -> None:
    from prefixroute.bench.adapters_live import add_live_arguments
    from prefixroute.engine_sim.cli import add_engine_arguments

    p = sub.add_parser("adapters", help="many LoRA adapters, few slots: adapter-aware vs blind prefix-cache, simulated")
    p.add_argument("--trace", required=True, help="a Mooncake JSONL trace; each conversation gets one adapter")
    p.add_argument("--requests", type=int, default=None, help="use only the first N requests")
    p.add_argument("--speed", type=float, default=1.0, help="divide arrival times by this")
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--adapters", type=int, default=AdapterMix.adapters, help="adapters in the workload")
    p.add_argument("--zipf", type=float, default=AdapterMix.exponent, help="the adapters' Zipf exponent")
    p.add_argument("--base-share", type=float, default=AdapterMix.base_share, help="conversations on the base model")
    p.add_argument("--seed", type=int, default=0, help="the adapters' draw")
    p.add_argument("--slots", type=int, default=4, help="adapters each engine holds at once (max_loras)")
    p.add_argument("--load-seconds", type=float, default=DEFAULT_LOAD_SECONDS, help="time to load one adapter")
    p.add_argument("--placed", type=int, default=0, help="also run with each adapter on this many replicas (0: no)")
    p.add_argument("--adapter-load-cost", type=int, default=None, help="the router's knob (default: its own)")
    p.add_argument("--json", dest="json_out", metavar="OUT")
    add_live_arguments(p)
    add_engine_arguments(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    return exit_status(_main, args)


def _main(args: argparse.Namespace) -> int:
    if args.replicas < 1 or args.slots < 1:
        raise BenchError("--replicas and --slots must be at least 1")
    mix = AdapterMix(args.adapters, args.zipf, args.base_share, args.seed)
    requests = compress(head(load_adapter_trace(args.trace, mix), args.requests), args.speed)
    if args.live:
        from prefixroute.bench.adapters_live import run_live

        runs = run_live(args, requests, mix.names, TARGETS, layouts(args, mix))
        rows = [row(r, results[0]) for results in runs for r in results]
        n = len(requests)
    else:
        rows, n = _simulated_rows(args, requests, mix)
    print(
        f"{args.trace}: {n} requests, {args.adapters} adapters (Zipf {args.zipf}), {args.replicas} "
        f"replicas x {args.slots} slots, {args.load_seconds * 1000:.0f} ms a load" + (", live" if args.live else "")
    )
    print_table(rows, sys.stdout)
    if args.json_out:
        meta = {k: v for k, v in vars(args).items() if k != "handler"}
        Path(args.json_out).write_text(json.dumps([{**r, "run": meta} for r in rows], indent=1) + "\n")
    return 0


def layouts(args: argparse.Namespace, mix: AdapterMix) -> list[tuple[str, Mapping[str, frozenset[str]] | None]]:
    """Where the adapters are registered, run after run: everywhere, then with `--placed N`
    on N replicas each (label suffix "/placed"), the same placement simulated and live."""
    out: list[tuple[str, Mapping[str, frozenset[str]] | None]] = [("", None)]
    if args.placed:
        out.append((PLACED, placement(mix, replica_names(args.replicas), args.placed)))
    return out


def _simulated_rows(
    args: argparse.Namespace, requests: Sequence[BenchRequest], mix: AdapterMix
) -> tuple[list[dict[str, Any]], int]:
    """Every target simulated (and again over a placement with --placed): the table's rows."""
    from prefixroute.engine_sim.cli import engine_config

    engine = engine_config(args, "engine-sim")
    routing = RoutingConfig(adapter_load_cost=args.adapter_load_cost)
    started = time.monotonic()
    prepared = prepare(requests, routing, engine)
    print(f"prepared {len(prepared)} requests ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    setups = [
        (suffix, AdapterSetup(args.slots, frozenset(mix.names), args.load_seconds, held))
        for suffix, held in layouts(args, mix)
    ]
    rows: list[dict[str, Any]] = []
    for suffix, setup in setups:
        results = []
        for target in TARGETS:
            started = time.monotonic()
            results.append(run_target(prepared, target, args.replicas, routing, engine, setup, target.label + suffix))
            print(f"simulated {target.label}{suffix} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
        rows.extend(row(r, results[0]) for r in results)
    return rows, len(prepared)
