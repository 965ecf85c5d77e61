"""`prefixroute bench simulate|replay|peers|autoscale|soak|fairness|priorities|adapters`.

Every bench error is printed as one line naming its cause (a bad trace line
names the file and line number) and exits with status 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from prefixroute.bench.errors import BenchError
from prefixroute.bench.seed_summary import add_seeds_argument, check_seeds
from prefixroute.bench.sources import emit, load_workload, source_label
from prefixroute.processes import ProcessError


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="a Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids)")
    source.add_argument(
        "--synthetic",
        choices=("tenants", "multiturn", "longdoc", "sessions", "conversations"),
        help="a generated workload (conversations: sized to --replicas engines of --kv-blocks)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="use only the first N requests (synthetic: how many to generate, default 1000)",
    )
    parser.add_argument("--rate", type=float, default=None, help="synthetic: arrivals per second")
    parser.add_argument("--seed", type=int, default=0, help="synthetic: random seed")
    parser.add_argument("--speed", type=float, default=1.0, help="divide arrival times by this")
    parser.add_argument("--model", default="engine-sim", help="model name sent in every request")
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write results as JSON")
    parser.add_argument("--plot", metavar="OUT.png", help="draw TTFT CDFs and per-replica load")
    parser.add_argument("--baseline", default=None, help="label to compute ratios against")


def _add_routing_arguments(parser: argparse.ArgumentParser) -> None:
    from prefixroute.routing.flags import add_knob_arguments, add_routing_arguments
    from prefixroute.routing.knobs import SCRAPE_INTERVAL

    add_routing_arguments(parser, exclude=("strategy",))  # --strategies names several
    add_knob_arguments(parser, [SCRAPE_INTERVAL])


def _add_simulate_parser(sub: Any) -> None:
    """`bench simulate`: its workload, fleet, router replicas and their peers, routing and engines."""
    from prefixroute.engine_sim.cli import AUTO, add_engine_arguments

    sim = sub.add_parser("simulate", help="discrete-event simulation over the real routing core")
    _add_workload_arguments(sim)
    sim.add_argument("--replicas", type=int, default=8)
    sim.add_argument("--strategies", default="round-robin,least-load,prefix-hash,prefix-cache")
    sim.add_argument(
        "--routers",
        default="1",
        help="router replicas behind a round-robin front, as a Service spreads them; a list runs each (1,2,4)",
    )
    sim.add_argument(
        "--modes",
        default="approximate",
        help="approximate (routing history, character blocks) and/or precise (the engines' KV events, token blocks)",
    )
    sim.add_argument(
        "--event-delay",
        type=float,
        default=0.005,
        help="precise: seconds from an engine's cache change to every router hearing of it",
    )
    sim.add_argument(
        "--router-time",
        default=MEASURED,
        help="what each TTFT is charged for the router's own work: measured (the real time of each request's "
        "keying — with the model's tokenizer where the run is precise — and routing step), or fixed SECONDS "
        "(0: nothing, for results that do not vary between runs)",
    )
    add_seeds_argument(sim)
    _add_peer_arguments(sim)
    _add_routing_arguments(sim)
    add_engine_arguments(sim, tokenizer=AUTO)
    sim.set_defaults(handler=run_simulate)


MEASURED = "measured"


def router_time(text: str) -> Any:
    """--router-time as `simulate`'s `RouterTime`: measured, or fixed seconds."""
    from prefixroute.bench.simulate import RouterTime

    if text == MEASURED:
        return RouterTime(None)
    try:
        seconds = float(text)
    except ValueError:
        raise BenchError(f"--router-time takes {MEASURED} or seconds, not {text!r}") from None
    if not seconds >= 0:
        raise BenchError("--router-time must not be negative")
    return RouterTime(seconds)


def _add_peer_arguments(sim: argparse.ArgumentParser) -> None:
    sim.add_argument(
        "--peers",
        default="off",
        help="what router replicas tell each other: off, load (in flight per member), all (load and what they "
        "routed where); a list runs each (off,all)",
    )
    sim.add_argument(
        "--peer-delay",
        type=float,
        default=0.005,
        help="seconds from a router's report leaving to every other router applying it",
    )
    sim.add_argument(
        "--peer-interval",
        type=float,
        default=None,
        help="the shortest time between two reports of one router (default: the fronts' own)",
    )


def register(subparsers: Any) -> None:
    from prefixroute.engine_sim.cli import AUTO, add_engine_arguments

    parser = subparsers.add_parser("bench", help="replay traces in simulation or live, and compare routers")
    sub = parser.add_subparsers(dest="bench_command", metavar="MODE")
    sub.required = True
    _add_simulate_parser(sub)

    rep = sub.add_parser("replay", help="live replay over HTTP against a router and engine-sim backends")
    _add_workload_arguments(rep)
    rep.add_argument(
        "--target",
        required=True,
        help="the router's base URL; several (comma-separated: router replicas) take requests in turn",
    )
    rep.add_argument("--engines", required=True, help="comma-separated engine base URLs (for their /metrics)")
    rep.add_argument("--label", default=None, help="name of this target in the results (default: the URL)")
    rep.add_argument("--time-scale", type=float, default=1.0, help="the engines' --time-scale (reports engine time)")
    rep.add_argument("--no-reset", action="store_true", help="keep the engines' caches from earlier runs")
    rep.add_argument("--tenant-header", default=None, help="send each synthetic request's tenant in this header")
    rep.add_argument("--quiet", action="store_true", help="no progress bar")
    rep.set_defaults(handler=run_replay)

    from prefixroute.bench.peers import add_peers_arguments, run_peers

    peers = sub.add_parser("peers", help="engine-sim fleet + prefixroute and peer routers, one live run each")
    _add_workload_arguments(peers)
    add_peers_arguments(peers)
    add_engine_arguments(peers, tokenizer=AUTO)
    peers.set_defaults(handler=_guarded(run_peers))
    from prefixroute.bench.fleet_sweep import add_arguments as add_fleet_arguments
    from prefixroute.bench.fleet_sweep import run as run_fleet

    fleet = sub.add_parser("fleet", help="simulate one shared-prefix session workload at growing fleet sizes")
    add_fleet_arguments(fleet)
    _add_routing_arguments(fleet)
    add_engine_arguments(fleet)
    fleet.set_defaults(handler=_guarded(run_fleet))
    from prefixroute.bench.decision_cost import add_arguments as add_decision_arguments
    from prefixroute.bench.decision_cost import run as run_decision

    decision = sub.add_parser("decision", help="microseconds per routing decision at growing fleet sizes")
    add_decision_arguments(decision)
    decision.set_defaults(handler=_guarded(run_decision))
    from prefixroute.bench.autoscale_sim import register as register_autoscale

    register_autoscale(sub)  # `bench autoscale`: the autoscaling policy vs a queue-only one
    from prefixroute.bench.soak import register as register_soak

    register_soak(sub)  # `bench soak`: concurrent streams through one router: errors, throughput, memory
    from prefixroute.bench.fairness import register as register_fairness

    register_fairness(sub)  # `bench fairness`: a noisy tenant against quiet ones, fair sharing on and off
    from prefixroute.bench.priorities import register as register_priorities

    register_priorities(sub)  # `bench priorities`: bands and TTFT objectives under overload, against baselines
    from prefixroute.bench.adapters import register as register_adapters

    register_adapters(sub)  # `bench adapters`: many LoRA adapters, few slots: adapter-aware vs blind routing


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args) or 0)
        except (BenchError, ProcessError) as exc:  # a process that would not start quotes its log
            print(f"prefixroute bench: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"prefixroute bench: {exc}", file=sys.stderr)
            return 2

    return run


def _simulate_axes(args: argparse.Namespace) -> tuple[list[int], list[str], list[str], float]:
    """The router counts, modes and sharings to run, and the peers' report interval (or BenchError)."""
    from prefixroute.bench.simulate import MODES, SHARING
    from prefixroute.routing.peers import DEFAULT_INTERVAL_S

    try:
        routers = [int(r) for r in str(args.routers).split(",") if r.strip()]
    except ValueError:
        raise BenchError("--routers must be a comma-separated list of positive integers") from None
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not routers or min(routers) < 1:
        raise BenchError("--routers must be a comma-separated list of positive integers")
    if not modes or any(m not in MODES for m in modes):
        raise BenchError(f"--modes takes {', '.join(MODES)}")
    if args.event_delay < 0:
        raise BenchError("--event-delay must not be negative")
    sharings = [p.strip() for p in args.peers.split(",") if p.strip()]
    if not sharings or any(p not in SHARING for p in sharings):
        raise BenchError(f"--peers takes {', '.join(SHARING)}")
    interval = DEFAULT_INTERVAL_S if args.peer_interval is None else args.peer_interval
    if args.peer_delay < 0 or interval < 0:
        raise BenchError("--peer-delay and --peer-interval must not be negative")
    return routers, modes, sharings, interval


def _simulate(args: argparse.Namespace) -> int:
    from prefixroute.bench.progress import Progress
    from prefixroute.bench.simulate import prepare
    from prefixroute.engine_sim.cli import engine_config
    from prefixroute.routing.config import STRATEGY_NAMES
    from prefixroute.routing.flags import routing_config_from_args

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGY_NAMES]
    if unknown:
        raise BenchError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGY_NAMES)}")
    if args.replicas < 1:
        raise BenchError("--replicas must be at least 1")
    routing = routing_config_from_args(args)
    routers, modes, sharings, interval = _simulate_axes(args)
    router_time(args.router_time)  # a bad value stops the run before the work
    check_seeds(args)
    engine = engine_config(args, args.model, precise="precise" in modes)
    if args.seeds > 1:
        return _simulate_seeds(args, strategies, routing, engine, (routers, modes, sharings, interval))
    requests = load_workload(args)
    bar = Progress(len(requests), "preparing", enabled=sys.stderr.isatty())
    prepared = prepare(requests, routing, engine, progress=lambda n: bar.update(done=n), precise="precise" in modes)
    bar.close()
    results = _simulate_runs(args, prepared, strategies, routing, engine, (routers, modes, sharings, interval))
    meta = _simulate_meta(args, len(requests), engine, (routers, modes, sharings, interval))
    emit(results, args, meta, f"simulation: {source_label(args)}, {len(requests)} requests, {args.replicas} replicas")
    return 0


def _simulate_meta(
    args: argparse.Namespace, requests: int, engine: Any, axes: tuple[list[int], list[str], list[str], float]
) -> dict[str, Any]:
    """The settings a simulated result is read with, as its JSON carries them."""
    from prefixroute.engine_model import tokenization

    routers, modes, sharings, interval = axes
    return {
        "mode": "simulate",
        "source": source_label(args),
        "requests": requests,
        "replicas": args.replicas,
        "routers": routers,
        "modes": modes,
        "event_delay": args.event_delay,
        "peers": sharings,
        "peer_delay": args.peer_delay,
        "peer_interval": interval,
        "speed": args.speed,
        "engine": _engine_meta(engine),
        "tokenizer": tokenization.describe(engine.tokenizer),
        "router_time": args.router_time,
    }


def _simulate_seeds(
    args: argparse.Namespace,
    strategies: list[str],
    routing: Any,
    engine: Any,
    axes: tuple[list[int], list[str], list[str], float],
) -> int:
    """Everything once per seed, then the means over the seeds (`bench.seed_summary`)."""
    from prefixroute.bench.seed_summary import drawn, print_seed_table, summarize, write_seed_json
    from prefixroute.bench.simulate import prepare
    from prefixroute.bench.sources import BASELINE

    runs: list[list[dict[str, Any]]] = []
    counts: list[int] = []  # requests drawn per seed (a generator may draw a few less than asked)
    seeds = check_seeds(args)
    for seed in seeds:
        workload = load_workload(drawn(args, seed))
        counts.append(len(workload))
        prepared = prepare(workload, routing, engine, precise="precise" in axes[1])
        runs.append([r.summary() for r in _simulate_runs(args, prepared, strategies, routing, engine, axes)])
        print(f"seed {seed}: done", file=sys.stderr)
    labels = [s["strategy"] for s in runs[0]]
    baseline = args.baseline or next((label for label in labels if label.endswith(BASELINE)), None)
    rows = summarize(runs, baseline)
    meta = _simulate_meta(args, max(counts), engine, axes)
    drawn_counts = f"{min(counts)}-{max(counts)}" if min(counts) != max(counts) else str(counts[0])
    print(f"simulation: {source_label(args)}, {drawn_counts} requests per seed, {args.replicas} replicas")
    print_seed_table(rows, args.seed, sys.stdout)
    if args.json_out:
        write_seed_json(args.json_out, meta, seeds, rows, runs)
    return 0


def _simulate_runs(
    args: argparse.Namespace,
    prepared: Any,
    strategies: list[str],
    routing: Any,
    engine: Any,
    axes: tuple[list[int], list[str], list[str], float],
) -> list[Any]:
    """One simulation per strategy, mode, router count and (with several routers) sharing."""
    from prefixroute.bench.simulate import peer_sharing, simulate
    from prefixroute.routing.flags import knob_from_args
    from prefixroute.routing.knobs import SCRAPE_INTERVAL

    routers, modes, sharings, interval = axes
    scrape_interval = knob_from_args(args, SCRAPE_INTERVAL)
    started = time.monotonic()
    results = []
    many = len(routers) > 1 or len(modes) > 1
    for name in strategies:
        for mode in modes:
            for count in routers:
                # One router has no peers: it runs once, whatever the sharing.
                for sharing in sharings if count > 1 else sharings[:1]:
                    label = f"{name} {mode} x{count}" if many else name
                    if len(sharings) > 1 and count > 1:
                        label += f" peers:{sharing}"
                    results.append(
                        simulate(
                            prepared,
                            name,
                            args.replicas,
                            routing,
                            engine,
                            scrape_interval,
                            routers=count,
                            mode=mode,
                            event_delay=args.event_delay,
                            label=label,
                            peers=peer_sharing(sharing, args.peer_delay, interval),
                            router_time=router_time(args.router_time),
                        )
                    )
                    print(f"simulated {label} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return results


def _engine_meta(engine: Any) -> dict[str, Any]:
    return {
        "block_tokens": engine.block_tokens,
        "kv_blocks": engine.kv_blocks,
        "max_running": engine.max_running,
        "prefill_tokens_per_s": engine.latency.prefill_tokens_per_s,
        "decode_tokens_per_s": engine.latency.decode_tokens_per_s,
        "max_model_len": engine.max_model_len,
    }


def _replay(args: argparse.Namespace) -> int:
    import asyncio

    from prefixroute.bench.replay import engine_tokenizers, replay

    engines = [u.strip().rstrip("/") for u in args.engines.split(",") if u.strip()]
    if not engines:
        raise BenchError("--engines needs at least one URL")
    targets = [u.strip() for u in args.target.split(",") if u.strip()]
    if not targets:
        raise BenchError("--target needs at least one URL")
    requests = load_workload(args)
    label = args.label or args.target
    result = asyncio.run(
        replay(
            requests,
            targets,
            engines,
            label=label,
            model=args.model,
            time_scale=args.time_scale,
            reset=not args.no_reset,
            tenant_header=args.tenant_header,
            show_progress=not args.quiet,
        )
    )
    meta = {
        "mode": "replay",
        "source": source_label(args),
        "requests": len(requests),
        "targets": targets,
        "engines": engines,
        "speed": args.speed,
        "time_scale": args.time_scale,
        "tokenizer": _tokenizer_meta(asyncio.run(engine_tokenizers(engines))),
    }
    emit([result], args, meta, f"replay: {source_label(args)}, {len(requests)} requests via {label}")
    return 0


def _tokenizer_meta(found: list[str | None]) -> str:
    """The engines' tokenizer as a replay reports it, or why it cannot."""
    from prefixroute.engine_model import tokenization

    named = set(found)
    if len(named) > 1:
        return "the engines differ: " + ", ".join(sorted(str(n) for n in named))
    (only,) = named
    return "not reported by the engines" if only is None else tokenization.describe(only)


run_simulate = _guarded(_simulate)
run_replay = _guarded(_replay)
