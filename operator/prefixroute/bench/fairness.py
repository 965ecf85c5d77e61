"""`bench fairness`: does a noisy tenant hurt the quiet ones? In simulation, and live.

The workload: `--quiet-tenants` tenants, each with its own system prompt, sending chat
requests at `--quiet-rate` each (Poisson), and one noisy tenant at `--noisy-factor` times
that rate — enough to push the fleet past its capacity. Three runs over the same engines:

- **quiet alone** (the baseline): the quiet tenants' requests only;
- **noisy, no fair sharing**: everyone, the router forwarding at once (`--max-in-flight-per-member 0`):
  the noisy backlog fills every engine's queue and the quiet requests wait behind it;
- **noisy, fair sharing**: everyone, with `--max-in-flight-per-member` set to the engines'
  running slots: the excess waits at the router, fairly (`prefixroute.tenancy.admission`).

Reported per run: the quiet tenants' TTFT p50/p99 and their ratio to the baseline's (the
goal: p99 within 1.5x with fair sharing), the noisy tenant's, the requests served and refused.
Simulation runs the real routing core and the same admission code as the router
(`fleet_sim.SimFleet`); live runs start engine-sim and router processes and replay over HTTP.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from prefixroute.bench.errors import BenchError, exit_status
from prefixroute.bench.fleet_sim import Arrival, Routed, SimFleet
from prefixroute.bench.local_fleet import engine_model_flags
from prefixroute.bench.results import percentile
from prefixroute.bench.simulate import Prepared, prepare, replica_names
from prefixroute.bench.texts import random_text
from prefixroute.bench.workload import BenchRequest, Body
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.scheduler import Event
from prefixroute.routing.config import RoutingConfig

NOISY = "noisy"
TENANT_HEADER = "X-Tenant"


@dataclass(frozen=True)
class Scenario:
    quiet_tenants: int = 4
    quiet_rate: float = 2.2  # requests/s per quiet tenant
    noisy_factor: float = 10.0  # the noisy tenant's rate over one quiet tenant's
    seconds: float = 300.0
    system_tokens: int = 2048
    question_tokens: int = 128
    output_tokens: int = 128


def workload(s: Scenario, seed: int = 0, noisy: bool = True) -> list[BenchRequest]:
    """Poisson arrivals per tenant; each request is its tenant's system prompt plus a unique question."""
    rng = np.random.default_rng(seed)
    tenants = [(f"quiet-{i}", s.quiet_rate) for i in range(s.quiet_tenants)]
    if noisy:
        tenants.append((NOISY, s.quiet_rate * s.noisy_factor))
    out: list[BenchRequest] = []
    for index, (tenant, rate) in enumerate(tenants):
        at = 0.0
        i = 0
        while True:
            at += float(rng.exponential(1.0 / rate))
            if at >= s.seconds:
                break

            def build(index: int = index, i: int = i) -> Body:
                return {
                    "messages": [
                        {"role": "system", "content": random_text(f"fair-{seed}", index, s.system_tokens)},
                        {"role": "user", "content": random_text(f"fair-q-{seed}-{index}", i, s.question_tokens)},
                    ]
                }

            out.append(BenchRequest(at, "chat", build, s.output_tokens, tenant=tenant))
            i += 1
    out.sort(key=lambda r: r.at)
    return out


@dataclass
class FairRun:
    label: str
    quiet: list[float]  # TTFTs of the quiet tenants' requests
    noisy: list[float]
    served: int = 0
    refused: int = 0

    def row(self, baseline: FairRun | None) -> dict[str, Any]:
        def pct(values: list[float], q: float) -> float | None:
            return round(percentile(values, q), 4) if values else None

        out: dict[str, Any] = {
            "run": self.label,
            "served": self.served,
            "refused": self.refused,
            "quiet_p50": pct(self.quiet, 50),
            "quiet_p99": pct(self.quiet, 99),
            "noisy_p50": pct(self.noisy, 50),
            "noisy_p99": pct(self.noisy, 99),
        }
        if baseline is not None and baseline.quiet and self.quiet:
            out["quiet_p50_x"] = round(percentile(self.quiet, 50) / percentile(baseline.quiet, 50), 2)
            out["quiet_p99_x"] = round(percentile(self.quiet, 99) / percentile(baseline.quiet, 99), 2)
        return out


def simulate_run(
    prepared: list[Prepared], label: str, replicas: int, routing: RoutingConfig, engine: EngineConfig, per_member: int
) -> FairRun:
    run = FairRun(label, [], [])

    def first_token(routed: Routed, event: Event) -> None:
        ttft = event.time - routed.arrival.at
        (run.noisy if routed.arrival.routing.tenant == NOISY else run.quiet).append(ttft)

    def finished(_routed: Routed, _event: Event) -> None:
        run.served += 1

    fleet = SimFleet(
        routing, engine, on_first_token=first_token, on_finished=finished, max_in_flight_per_member=per_member
    )
    fleet.add(*replica_names(replicas))
    for i, item in enumerate(prepared):
        fleet.advance_to(item.at)
        if item.routing is None:
            raise BenchError(f"request {i} was not accepted: {item.error}")
        fleet.submit(Arrival(f"r{i}", item.at, item.routing, item.blocks, item.prompt_tokens, item.output_tokens))
    fleet.advance_to(float("inf"))
    run.refused = fleet.rejected
    return run


def live_run(
    requests: list[BenchRequest], label: str, args: argparse.Namespace, engine_flags: list[str], per_member: int
) -> FairRun:
    import asyncio

    from prefixroute.bench.local_fleet import engine_fleet, running_router
    from prefixroute.bench.replay import replay

    log_dir = Path(tempfile.mkdtemp(prefix="prefixroute-fairness-"))
    router_port = args.base_port + 100
    with engine_fleet(args, engine_flags, log_dir) as engines:
        flags = ["--backends", ",".join(engines), "--tenant-header", TENANT_HEADER]
        flags += ["--max-in-flight-per-member", str(per_member), "--max-waiting", "100000", "--max-wait-seconds", "600"]
        with running_router(router_port, flags, log_dir / "router.log") as router:
            scaled = [replace(r, at=r.at / args.time_scale) for r in requests]
            run = replay(
                scaled,
                router.url,
                engines,
                label=label,
                model=args.model,
                time_scale=args.time_scale,
                tenant_header=TENANT_HEADER,
                show_progress=sys.stderr.isatty(),
            )
            result = asyncio.run(run)
    quiet = [t for tenant, ts in result.tenant_ttfts.items() if tenant != NOISY for t in ts]
    return FairRun(label, quiet, result.tenant_ttfts.get(NOISY, []), served=result.requests, refused=result.errors)


def print_table(rows: list[dict[str, Any]], stream: Any) -> None:
    header = ("run", "served", "refused", "quiet p50", "quiet p99", "p50 x", "p99 x", "noisy p50", "noisy p99")
    keys = (
        "run",
        "served",
        "refused",
        "quiet_p50",
        "quiet_p99",
        "quiet_p50_x",
        "quiet_p99_x",
        "noisy_p50",
        "noisy_p99",
    )
    table = [header] + [tuple("-" if r.get(k) is None else str(r.get(k)) for k in keys) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for n, row in enumerate(table):
        stream.write(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) + "\n"
        )
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    stream.write("(x = the quiet tenants' TTFT over theirs when alone, same run; TTFT in engine seconds)\n")


def register(sub: Any) -> None:
    from prefixroute.engine_sim.cli import add_engine_arguments

    p = sub.add_parser("fairness", help="a noisy tenant against quiet ones: fair sharing on and off")
    p.add_argument("--live", action="store_true", help="engine-sim and router processes over HTTP (default: simulate)")
    p.add_argument("--quiet-tenants", type=int, default=Scenario.quiet_tenants)
    p.add_argument("--quiet-rate", type=float, default=Scenario.quiet_rate, help="requests/s per quiet tenant")
    p.add_argument(
        "--noisy-factor", type=float, default=Scenario.noisy_factor, help="the noisy tenant's rate / a quiet one's"
    )
    p.add_argument("--seconds", type=float, default=Scenario.seconds, help="length of the workload (engine seconds)")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument(
        "--max-in-flight-per-member",
        type=int,
        default=None,
        help="the fair-sharing run's setting (default: the engines' --max-running)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="engine-sim")
    p.add_argument("--time-scale", type=float, default=10.0, help="live: engines run this much faster than engine time")
    p.add_argument("--base-port", type=int, default=19200, help="live: first engine's port (the router: +100)")
    p.add_argument("--json", dest="json_out", metavar="OUT")
    add_engine_arguments(p)
    p.set_defaults(handler=main, max_running=8)  # engines of 8 running slots: the fleet fills at a modest rate


def main(args: argparse.Namespace) -> int:
    return exit_status(_main, args)


def _main(args: argparse.Namespace) -> int:
    import json

    from prefixroute.engine_sim.cli import engine_config

    if args.quiet_tenants < 1 or args.quiet_rate <= 0 or args.noisy_factor <= 0 or args.seconds <= 0:
        raise BenchError("--quiet-tenants, --quiet-rate, --noisy-factor and --seconds must be positive")
    scenario = Scenario(args.quiet_tenants, args.quiet_rate, args.noisy_factor, args.seconds)
    per_member = args.max_in_flight_per_member or args.max_running
    engine = engine_config(args, args.model)
    routing = RoutingConfig()
    runs = (
        ("quiet alone", False, per_member),
        ("noisy, no fair sharing", True, 0),
        ("noisy, fair sharing", True, per_member),
    )
    started = time.monotonic()
    results: list[FairRun] = []
    for label, noisy, limit in runs:
        requests = workload(scenario, args.seed, noisy)
        if args.live:
            results.append(live_run(requests, label, args, engine_model_flags(args), limit))
        else:
            prepared = prepare(requests, routing, engine)
            results.append(simulate_run(prepared, label, args.replicas, routing, engine, limit))
        print(f"{label}: done ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    rows = [r.row(results[0]) for r in results]
    print_table(rows, sys.stdout)
    if args.json_out:
        meta = {
            "scenario": scenario.__dict__,
            "replicas": args.replicas,
            "max_in_flight_per_member": per_member,
            "live": args.live,
            "seed": args.seed,
            "max_running": args.max_running,
        }
        with open(args.json_out, "w") as f:
            json.dump({"run": meta, "rows": rows}, f, indent=1)
            f.write("\n")
    return 0
