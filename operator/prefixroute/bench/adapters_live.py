"""`bench adapters --live`: LoRA adapters through real processes on loopback.

`--replicas` engine-sims start once, each with `--max-loras` slots and every adapter of the
mix registered (`--lora-modules`, folders written under the run directory). The workload is
`bench.adapter_workload`'s: a trace's conversations, each on one adapter drawn with Zipf
popularity. For each target our router starts in front of the engines, every adapter is
unloaded and loaded again on every engine (so each target starts with empty slots, as the
caches are emptied too), `bench.replay` sends the workload through it as clients would, and
the router stops.

Measured: the hit rate from the engines' prefix-cache counters; TTFT at the client (so the
router's own time is in it), in engine seconds; adapter loads per engine minute from the
engines' `prefixroute_engine_sim_lora_loads_total` across the run. Every ratio is against
the baseline (round-robin) measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from prefixroute.bench import prom
from prefixroute.bench.errors import BenchError, TargetError
from prefixroute.bench.local_fleet import engine_model_flags, events_config, router_command, start_engines
from prefixroute.bench.replay import replay
from prefixroute.bench.results import RunResult, percentile
from prefixroute.bench.workload import BenchRequest
from prefixroute.processes import Child

LOADS = "prefixroute_engine_sim_lora_loads_total"


@dataclass(frozen=True)
class Target:
    label: str
    strategy: str
    adapter_aware: bool  # the router believes the engines' slots (--adapter-slots = --max-loras)


TARGETS = (
    Target("prefix-cache", "prefix-cache", True),
    Target("prefix-cache blind", "prefix-cache", False),
    Target("round-robin", "round-robin", False),
)
BASELINE = "round-robin"


@dataclass(frozen=True)
class LiveFleet:
    """Engine-sims already answering, their adapters, and where each target's router goes."""

    engines: list[str]
    adapters: dict[str, str]  # name -> folder, registered on every engine
    event_ports: list[int]  # each engine's KV event port (precise mode), else empty
    router_port: int
    log_dir: Path


@dataclass
class Row:
    """One target's run: what replay measured, and the adapter loads the engines counted."""

    label: str
    result: RunResult
    loads: float

    @property
    def loads_per_minute(self) -> float:
        minutes = self.result.duration_s / 60.0
        return self.loads / minutes if minutes > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "target": self.label,
            "requests": self.result.requests,
            "errors": self.result.errors,
            "hit_rate": round(self.result.hit_rate, 4),
            "ttft_p50": round(percentile(self.result.ttfts, 50), 4),
            "ttft_p99": round(percentile(self.result.ttfts, 99), 4),
            "adapter_loads": int(self.loads),
            "adapter_loads_per_min": round(self.loads_per_minute, 2),
            "duration_s": round(self.result.duration_s, 1),
            "host_load_1m": list(self.result.host_load) if self.result.host_load else None,
        }


def write_adapters(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """An adapter folder per name (engine-sim reads only its adapter_config.json): name -> path."""
    from prefixroute.engine_sim.lora import write_adapter_folder

    return {name: str(write_adapter_folder(folder / name)) for name in names}


def engine_flags(args: argparse.Namespace, adapters: Mapping[str, str]) -> list[str]:
    """The engines' flags: the bench's engine model, its LoRA slots, every adapter registered."""
    return [
        *engine_model_flags(args),
        f"--tokenizer={args.tokenizer}",
        f"--max-loras={args.max_loras}",
        f"--lora-load-seconds={args.lora_load_seconds}",
        "--lora-modules",
        *(f"{name}={path}" for name, path in adapters.items()),
    ]


def router_flags(target: Target, args: argparse.Namespace, fleet: LiveFleet) -> list[str]:
    """One target's router: its strategy, its belief in the engines' slots (or none), the
    model it serves (other request models are adapters), precise mode's events where asked."""
    flags = ["--backends", ",".join(fleet.engines), "--strategy", target.strategy, "--served-model", args.model]
    if target.strategy == "prefix-cache":
        flags += ["--adapter-slots", str(args.max_loras if target.adapter_aware else 0)]
    if fleet.event_ports:
        flags += ["--mode", "precise", "--tokenizer", args.tokenizer, "--block-size", str(args.block_tokens)]
        flags += ["--kv-events", ",".join(f"tcp://127.0.0.1:{p}" for p in fleet.event_ports)]
        flags += ["--kv-events-replay", ",".join(f"tcp://127.0.0.1:{p + 1}" for p in fleet.event_ports)]
    return flags + shlex.split(args.router_flags or "")


async def empty_slots(engines: Sequence[str], adapters: Mapping[str, str]) -> None:
    """Unload and load again every adapter on every engine: an adapter unloaded leaves its slot,
    so the next target starts with none resident, whatever the last one left."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for url in engines:
            for name, path in adapters.items():
                for verb, body in (("unload", {"lora_name": name}), ("load", {"lora_name": name, "lora_path": path})):
                    async with session.post(f"{url}/v1/{verb}_lora_adapter", json=body) as resp:
                        if resp.status != 200:
                            raise TargetError(f"{url} answered {verb} of {name} with HTTP {resp.status}")


def adapter_loads(engines: Sequence[str]) -> float:
    """Adapter loads the engines have counted so far, together."""
    total = 0.0
    for url in engines:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
                total += prom.total(prom.samples(resp.read().decode()), LOADS)
        except OSError as exc:
            raise TargetError(f"cannot read {url}/metrics: {exc!r}") from None
    return total


def play(fleet: LiveFleet, target: Target, requests: Sequence[BenchRequest], args: argparse.Namespace) -> Row:
    """The workload through a router of its own for `target`, slots and caches emptied first."""
    flags = router_flags(target, args, fleet)
    log = fleet.log_dir / f"router-{target.label.replace(' ', '-')}.log"
    router = Child("router", router_command(fleet.router_port, *flags), log, fleet.router_port)
    router.start()
    try:
        router.wait_http("/health", timeout=60.0)
        asyncio.run(empty_slots(fleet.engines, fleet.adapters))
        before = adapter_loads(fleet.engines)
        run = replay(
            requests,
            router.url,
            fleet.engines,
            label=target.label,
            model=args.model,
            time_scale=args.time_scale,
            show_progress=sys.stderr.isatty(),
        )
        result = asyncio.run(run)
        loads = adapter_loads(fleet.engines) - before
    finally:
        router.stop()
    return Row(target.label, result, loads)


@contextmanager
def engine_fleet(args: argparse.Namespace, adapters: Mapping[str, str], log_dir: Path) -> Iterator[LiveFleet]:
    """`args.replicas` engine-sims on `args.base_port`.. with every adapter registered (their KV
    event ports above the router's in precise mode), stopped on the way out."""
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    router_port = args.base_port + args.replicas
    ports = [router_port + 1 + 2 * i for i in range(args.replicas)] if args.precise else []
    per_engine = [["--kv-events-config", events_config(port, i)] for i, port in enumerate(ports)] or None
    engines, procs = start_engines(
        args.replicas,
        args.base_port,
        args.model,
        str(ensure_model_dir()),
        args.time_scale,
        engine_flags(args, adapters),
        log_dir,
        per_engine,
    )
    try:
        yield LiveFleet(engines, dict(adapters), ports, router_port, log_dir)
    finally:
        for proc in procs:
            proc.stop()


def with_ratios(summaries: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """Each row's hit rate, TTFTs and loads per minute over the baseline's, measured in the same run."""
    base = next((s for s in summaries if s["target"] == baseline), None)
    if base is None:
        raise BenchError(f"the baseline {baseline!r} is not among the targets")
    out = []
    for s in summaries:
        ratios = {}
        for key in ("hit_rate", "ttft_p50", "ttft_p99", "adapter_loads_per_min"):
            ratios[f"{key}_x"] = round(s[key] / base[key], 3) if base[key] else None
        out.append({**s, **ratios, "baseline": baseline})
    return out


def print_table(rows: Sequence[dict[str, Any]], stream: TextIO) -> None:
    """A Markdown table: the figures, then their ratios to the baseline."""
    stream.write(
        "| target | reqs | errs | hit rate | TTFT p50 | TTFT p99 | loads/min | hit x | p50 x | p99 x | loads x |\n"
    )
    stream.write("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")

    def x(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for s in rows:
        stream.write(
            f"| {s['target']} | {s['requests']} | {s['errors']} | {s['hit_rate']:.1%} | {s['ttft_p50']:.3f} | "
            f"{s['ttft_p99']:.3f} | {s['adapter_loads_per_min']:.1f} | {x(s['hit_rate_x'])} | "
            f"{x(s['ttft_p50_x'])} | {x(s['ttft_p99_x'])} | {x(s['adapter_loads_per_min_x'])} |\n"
        )
    if rows:
        stream.write(f"(x = ratio to {rows[0]['baseline']} in this run; TTFT in engine seconds, at the client)\n")


def targets(names: str) -> list[Target]:
    known = {t.label: t for t in TARGETS}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise BenchError(f"--targets takes {', '.join(known)}")
    if BASELINE not in wanted:
        raise BenchError(f"--targets must include the baseline, {BASELINE}")
    return [known[n] for n in wanted]


def run_live(args: argparse.Namespace, requests: Sequence[BenchRequest], names: Sequence[str]) -> list[dict[str, Any]]:
    """Every target over one engine fleet serving `names`; the table's rows, with ratios."""
    chosen = targets(args.targets)
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="prefixroute-adapters-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs and adapter folders in {run_dir}", file=sys.stderr)
    adapters = write_adapters(run_dir / "adapters", names)
    rows = []
    with engine_fleet(args, adapters, run_dir) as fleet:
        for target in chosen:
            rows.append(play(fleet, target, requests, args).summary())
    return with_ratios(rows, BASELINE)


def register(sub: Any) -> None:
    from prefixroute.engine_model.adapters import DEFAULT_LOAD_SECONDS
    from prefixroute.engine_sim.cli import add_engine_arguments

    p = sub.add_parser("adapters", help="LoRA adapters with Zipf popularity: adapter-aware routing against baselines")
    p.add_argument("--live", action="store_true", help="engine-sim and router processes on loopback (required)")
    p.add_argument("--trace", required=True, help="a Mooncake JSONL trace: its conversations get the adapters")
    p.add_argument("--requests", type=int, default=400, help="the trace's first N requests")
    p.add_argument("--speed", type=float, default=1.0, help="divide arrival times by this")
    p.add_argument("--adapters", type=int, default=50, help="adapters in the mix, all registered on every engine")
    p.add_argument("--zipf", type=float, default=1.0, help="adapter k's share is proportional to 1/k^this")
    p.add_argument("--base-share", type=float, default=0.1, help="conversations on the base model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--max-loras", type=int, default=4, help="each engine's adapter slots")
    p.add_argument("--lora-load-seconds", type=float, default=DEFAULT_LOAD_SECONDS)
    p.add_argument("--targets", default=",".join(t.label for t in TARGETS), help="which targets to run")
    p.add_argument("--precise", action="store_true", help="engines publish KV events and routers follow them")
    p.add_argument("--router-flags", default="", help="more flags for every router (one shell-quoted string)")
    p.add_argument("--time-scale", type=float, default=1.0, help="engines run this much faster than engine time")
    p.add_argument("--base-port", type=int, default=29100, help="the engines' first port (the router: after them)")
    p.add_argument("--model", default="engine-sim", help="the engines' served model name")
    p.add_argument("--run-dir", default=None, help="where process logs and adapter folders go (default: a temp dir)")
    p.add_argument("--json", dest="json_out", metavar="OUT")
    add_engine_arguments(p)
    p.set_defaults(handler=main, max_model_len=262_144)  # the trace has prompts longer than 131,072 tokens


def main(args: argparse.Namespace) -> int:
    from prefixroute.bench.errors import exit_status

    return exit_status(_main, args)


def _main(args: argparse.Namespace) -> int:
    import json

    from prefixroute.bench.adapter_workload import AdapterMix, load_adapter_trace
    from prefixroute.bench.workload import compress, head

    if not args.live:
        raise BenchError("bench adapters runs live only: pass --live")
    mix = AdapterMix(args.adapters, args.zipf, args.base_share, args.seed)
    requests = compress(head(load_adapter_trace(args.trace, mix), args.requests), args.speed * args.time_scale)
    rows = run_live(args, requests, mix.names)
    print_table(rows, sys.stdout)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0
