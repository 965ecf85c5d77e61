"""`prefixroute bench fleet`: the same workload at growing fleet sizes, load held per replica.

At each size the `sessions` workload (one shared prefix, then each session's own
conversation) is generated with sessions and arrival rate in proportion to the
replicas, so every replica sees the same load at every size, and simulated
(`simulate.simulate`: the routing core's one dispatch over engine-model engines)
for each strategy, for the longest-prefix reference router (`reference.py`) and
against the ceiling of one unlimited cache. Ratios are against round-robin at the
same size, in the same run. The wall time of each simulation is reported too: the
engines cost the same whatever the router does, so its growth with the fleet is
the decision's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from prefixroute.bench.errors import BenchError
from prefixroute.bench.reference import LONGEST_PREFIX, LongestPrefix, unlimited_cache_hit_rate
from prefixroute.bench.results import RunResult
from prefixroute.bench.simulate import prepare, simulate
from prefixroute.bench.synthetic import sessions
from prefixroute.engine_model.config import EngineConfig
from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig

BASELINE = "round-robin"
DEFAULT_SIZES = "8,16,32,64,128,256,512,1024"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated replica counts")
    parser.add_argument(
        "--requests-per-replica", type=int, default=94, help="requests generated per replica (94: 24,064 at 256)"
    )
    parser.add_argument(
        "--rate-per-replica", type=float, default=6.0, help="arrivals per second per replica (load per replica)"
    )
    parser.add_argument("--prefix-tokens", type=int, default=2048, help="the prefix every request starts with")
    parser.add_argument("--think-s", type=float, default=2.0, help="mean think time between a session's turns")
    parser.add_argument("--min-turns", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strategies", default="round-robin,prefix-hash,prefix-cache")
    parser.add_argument("--no-reference", action="store_true", help="skip the longest-prefix reference router")
    parser.add_argument("--model", default="engine-sim", help="model name sent in every request")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write every row as JSON")
    parser.add_argument("--plot", metavar="OUT.png", help="hit rate and TTFT ratios against fleet size")


def _row(result: RunResult, replicas: int, engine: EngineConfig, wall_s: float) -> dict[str, Any]:
    s = result.summary()
    uncached = result.prompt_tokens - result.cached_tokens
    busy = uncached / engine.latency.prefill_tokens_per_s
    return {
        "replicas": replicas,
        "strategy": result.strategy,
        "requests": s["requests"],
        "errors": s["errors"],
        "hit_rate": s["hit_rate"],
        "ttft_p50": s["ttft_p50"],
        "ttft_p99": s["ttft_p99"],
        "ttft_mean": round(sum(result.ttfts) / len(result.ttfts), 4) if result.ttfts else None,
        "imbalance": s["imbalance"],
        # Share of the fleet's GPU time spent in prefill: the load the routing leaves.
        "prefill_busy": round(busy / (replicas * result.duration_s), 4) if result.duration_s > 0 else None,
        "wall_s": round(wall_s, 2),
    }


def _with_ratios(rows: list[dict[str, Any]]) -> None:
    base = next((r for r in rows if r["strategy"] == BASELINE), None)
    for row in rows:
        for key in ("ttft_p50", "ttft_p99"):
            a, b = row.get(key), base.get(key) if base else None
            row[f"{key}_vs_rr"] = round(a / b, 3) if a is not None and b else None
        row["hit_minus_rr"] = round(row["hit_rate"] - base["hit_rate"], 4) if base else None


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_rows(rows: list[dict[str, Any]], out: Any) -> None:
    header = (
        "replicas",
        "strategy",
        "reqs",
        "hit rate",
        "ceiling",
        "p50",
        "p99",
        "p50 x",
        "p99 x",
        "imbal",
        "busy",
        "sim s",
    )
    table = [header]
    for r in rows:
        table.append(
            (
                str(r["replicas"]),
                r["strategy"],
                str(r["requests"]),
                f"{r['hit_rate']:.1%}",
                _fmt(r.get("ceiling"), ".1%"),
                _fmt(r["ttft_p50"], ".3f"),
                _fmt(r["ttft_p99"], ".3f"),
                _fmt(r.get("ttft_p50_vs_rr"), ".2f"),
                _fmt(r.get("ttft_p99_vs_rr"), ".2f"),
                f"{r['imbalance']:.2f}",
                _fmt(r.get("prefill_busy"), ".0%"),
                f"{r['wall_s']:.1f}",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for n, row in enumerate(table):
        out.write("  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + "\n")
        if n == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")
    out.flush()


def run_size(
    replicas: int,
    args: argparse.Namespace,
    strategies: list[str],
    routing: RoutingConfig,
    engine: EngineConfig,
) -> list[dict[str, Any]]:
    """Every strategy (and the reference) at one fleet size, on one generated workload."""
    requests = sessions(
        replicas * args.requests_per_replica,
        rate=replicas * args.rate_per_replica,
        seed=args.seed,
        prefix_tokens=args.prefix_tokens,
        min_turns=args.min_turns,
        max_turns=args.max_turns,
        think_s=args.think_s,
    )
    started = time.monotonic()
    prepared = prepare(requests, routing, engine)
    print(
        f"[{replicas} replicas] {len(prepared)} requests prepared in {time.monotonic() - started:.1f}s", file=sys.stderr
    )
    ceiling = round(unlimited_cache_hit_rate(prepared, engine.block_tokens), 4)
    runs: list[tuple[str, Any]] = [(name, None) for name in strategies]
    if not args.no_reference:
        runs.append((LONGEST_PREFIX, LongestPrefix))
    rows = []
    for name, maker in runs:
        started = time.monotonic()
        if maker is None:
            result = simulate(prepared, name, replicas, routing, engine)
        else:
            result = simulate(prepared, BASELINE, replicas, routing, engine, make_strategy=maker, label=name)
        wall = time.monotonic() - started
        rows.append({**_row(result, replicas, engine, wall), "ceiling": ceiling})
        print(f"[{replicas} replicas] {name}: {wall:.1f}s", file=sys.stderr)
    _with_ratios(rows)
    return rows


def run(args: argparse.Namespace) -> int:
    from prefixroute.engine_sim.cli import engine_config
    from prefixroute.routing.flags import routing_config_from_args

    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise BenchError(f"--sizes must be comma-separated integers, got {args.sizes!r}") from None
    if not sizes or min(sizes) < 1:
        raise BenchError("--sizes needs at least one replica count, each at least 1")
    if args.requests_per_replica < 1 or args.rate_per_replica <= 0:
        raise BenchError("--requests-per-replica and --rate-per-replica must be positive")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGY_NAMES]
    if unknown:
        raise BenchError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGY_NAMES)}")
    if BASELINE not in strategies:
        strategies.insert(0, BASELINE)  # ratios need it
    routing = routing_config_from_args(args)
    engine = engine_config(args, args.model)
    rows: list[dict[str, Any]] = []
    for replicas in sizes:
        size_rows = run_size(replicas, args, strategies, routing, engine)
        print_rows(size_rows, sys.stdout)
        rows.extend(size_rows)
        if args.json_out:  # after every size, so a long sweep's finished sizes are kept
            Path(args.json_out).write_text(json.dumps(rows, indent=1) + "\n")
    if len(sizes) > 1:
        print("\nall sizes:")
        print_rows(rows, sys.stdout)
    print(
        "(x = ratio to round-robin at the same size, this run; TTFT in engine seconds; busy = prefill share of GPU time;"
    )
    print(" ceiling = hit rate of one unlimited cache; sim s = wall seconds of the simulation)")
    if args.plot:
        plot(rows, args.plot)
    return 0


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (hits, tails, cost) = plt.subplots(1, 3, figsize=(17, 5.5))
    names = list(dict.fromkeys(r["strategy"] for r in rows))
    for name in names:
        mine = [r for r in rows if r["strategy"] == name]
        xs = [r["replicas"] for r in mine]
        style = "--" if name == LONGEST_PREFIX else "-"
        hits.plot(xs, [100 * r["hit_rate"] for r in mine], marker="o", linestyle=style, label=name)
        tails.plot(xs, [r["ttft_p99_vs_rr"] for r in mine], marker="o", linestyle=style, label=f"{name} p99")
        per_request = [1e3 * r["wall_s"] / max(1, r["requests"]) for r in mine]
        cost.plot(xs, per_request, marker="o", linestyle=style, label=name)
    ceiling = sorted({(r["replicas"], r["ceiling"]) for r in rows})
    hits.plot([c[0] for c in ceiling], [100 * c[1] for c in ceiling], "k:", label="one unlimited cache")
    for ax, title, ylabel in (
        (hits, "KV cache hit rate", "% of prompt tokens"),
        (tails, "TTFT p99 / round-robin's (same size)", "ratio"),
        (cost, "simulation wall time per request", "ms"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("replicas")
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("One shared prefix, multi-turn sessions, load per replica held constant (simulated)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
